"""`autoresearch tui`: the Textual console on a workspace, in the terminal or served to a browser."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from tui.panes import NAMES

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command("tui")
@click.option("--pane", type=click.Choice(NAMES), default="fleet", show_default=True, help="Pane to open on.")
@click.option("--serve", is_flag=True, help="Serve the console to a web browser (textual-serve) instead.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="With --serve: address to listen on. Keep it on localhost and reach it through an SSH "
    "tunnel (ssh -L 8000:127.0.0.1:8000 HOST); the URL printed at start carries the access token.",
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="With --serve: port."
)
@click.option(
    "--public-url",
    default=None,
    callback=lambda _ctx, _param, value: _public_url(value),
    help="With --serve: the URL browsers use, if not http://HOST:PORT (its host name is accepted).",
)
@click.pass_context
def cli(ctx: click.Context, pane: str, serve: bool, host: str, port: int, public_url: str | None) -> None:
    """Open the console: knowledge base, hypothesis queue, live fleet, history.

    It reads the workspace database and steers the runner through it; runs and miners it starts
    are separate processes that go on when it quits (or the SSH session drops). Press ? for keys.

    With --serve, each browser tab runs its own console process (textual-serve), bound to
    127.0.0.1 by default. Open the URL it prints: it carries a random token, and the console
    answers only requests with that token, from its own page (Origin) and on its own names (Host).
    Anyone with the token can start and stop runs.
    """
    root = locate(ctx)
    if serve:
        _serve(root.as_posix(), pane, host, port, public_url)
        return
    from tui.app import make_app

    make_app(root, pane=pane).run()


def _public_url(value: str | None) -> str | None:
    """An http(s) URL with a host (the name the console answers to); a path is kept (a reverse
    proxy may serve the console under one)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise click.BadParameter(f"{value!r}: not a valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(f"{value!r}: give http(s)://HOST[:PORT], the address browsers open")
    return value.rstrip("/")


def locate(ctx: click.Context) -> Path:
    """The workspace folder, found without the database and config modules: the console must
    paint first (it opens and migrates the database in a worker)."""
    from kb.locate import workspace_root

    obj = ctx.find_root().obj
    return workspace_root(obj.get("workspace") if isinstance(obj, dict) else None)


def _serve(root: str, pane: str, host: str, port: int, public_url: str | None) -> None:
    from tui.cli.common import echo  # the workspace's modules: not on the console's start-up path
    from tui.serve import ConsoleServer

    command = shlex.join([sys.executable, "-m", "tui.cli", "--workspace", root, "tui", "--pane", pane])
    server = ConsoleServer(command, host=host, port=port, public_url=public_url)
    if host not in LOOPBACK:
        echo(
            f"warning: serving on {host}, not localhost: anyone who can reach the port and has the "
            "token can start, pause and stop runs, and plain http carries the token in clear "
            "(prefer an SSH tunnel, or an HTTPS reverse proxy with --public-url https://...)",
            err=True,
        )
    echo(f"serving the console on {server.url} (ctrl+c stops)", err=True)
    server.serve()
