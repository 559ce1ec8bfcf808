"""`autoresearch kb add-prs | prs`: the upstream's pull requests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import TEXT

if TYPE_CHECKING:
    from kb.prs import PullRequest


@click.command("add-prs")
@click.argument("remote", type=TEXT)
@click.option(
    "--name", type=TEXT, help="Prefix of the pull requests' fork names (default: the remote's name)."
)
@click.option(
    "--limit", type=click.IntRange(1, 5000), help="Newest pull requests read (default: kb.prs.limit)."
)
@click.option(
    "--state",
    type=click.Choice(["open", "all"]),
    default="open",
    show_default=True,
    help="open: leave out those the host's API says were closed unmerged.",
)
@click.option(
    "--project", type=TEXT, metavar="OWNER/NAME", help="The host's project, when REMOTE is a local copy."
)
@json_option
@click.pass_context
def add_prs(
    ctx: click.Context,
    remote: str,
    name: str | None,
    limit: int | None,
    state: str,
    project: str | None,
    as_json: bool,
) -> None:
    """Read the pull requests REMOTE exposes as refs (GitHub's refs/pull/N/head, GitLab's
    refs/merge-requests/N/head), each one's commits against the baseline like a fork's, its title
    and description from the host's API when online (else from its head commit). Those already in
    the baseline are flagged upstream; the others are mined into hypotheses, one per pull request
    (`autoresearch hypotheses mine`, or the autopilot's next research phase)."""
    from kb.prs import add_prs as run

    ws = workspace(ctx)

    def progress(pull: PullRequest) -> None:
        if as_json:
            return
        flag = f"upstream: {pull.upstream_reason}" if pull.upstream else pull.state
        echo(f"#{pull.number} [{flag}] {pull.title} ({pull.commits} commits, {pull.files} files)")

    report = run(
        ws,
        ws.db(),
        remote,
        name=name,
        limit=limit,
        state="all" if state == "all" else "open",
        project=project,
        progress=progress,
    )
    if as_json:
        echo_json(report.to_json())
    else:
        for pull in report.pulls:
            if pull.status == "skipped":
                echo(f"#{pull.number} skipped: {pull.upstream_reason}")
        echo(report.line())
    for note in report.notes:
        echo(f"Note: {note}", err=True)


@click.command("prs")
@json_option
@click.pass_context
def prs(ctx: click.Context, as_json: bool) -> None:
    """List the pull requests read, with their state, whether they are upstream and their hypothesis."""
    from kb.store.prs import listing

    found = listing(workspace(ctx).db())
    if as_json:
        echo_json(list(found))
        return
    if not found:
        echo("no pull requests yet (autoresearch kb add-prs REMOTE)")
        return
    echo_table(
        ["#", "state", "upstream", "commits", "hypothesis", "title"],
        [
            [
                p["number"],
                p["state"],
                "yes" if p["upstream"] else "",
                p["commits"],
                p["hypothesis"] or "",
                p["title"] if len(p["title"]) <= 60 else p["title"][:59] + "…",
            ]
            for p in found
        ],
    )
