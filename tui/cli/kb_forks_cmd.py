"""`autoresearch kb add-fork | forks | commits`."""

from __future__ import annotations

import click

from tui.cli.common import echo, echo_json, echo_table, json_option, workspace
from tui.cli.params import TEXT


@click.command("add-fork")
@click.argument("name", type=TEXT)
@click.argument("location", required=False, type=TEXT, metavar="[URL|PATH]")
@click.option("--branch", "-b", help="Branch of the fork (default: its default branch).")
@click.option(
    "--fork-point",
    metavar="SHA",
    help="The fork's commit where it left the target, for a target with no history to find it by.",
)
@json_option
@click.pass_context
def add_fork(
    ctx: click.Context,
    name: str,
    location: str | None,
    branch: str | None,
    fork_point: str | None,
    as_json: bool,
) -> None:
    """Fetch a fork into the workspace mirror and record its fork-only commits as evidence.

    The fork point is the merge base, or, when the fork's history was rewritten or is unrelated,
    found by content (identical trees, else the closest files); when nothing is close the fork's
    files are compared with the baseline's one by one. Run it again (LOCATION may then be left out,
    also for a fork the config's [reading] section suggests) to record the new commits only."""
    from kb.forks import add_fork as run_add_fork

    ws = workspace(ctx)
    result = run_add_fork(ws, ws.db(), name, location, branch=branch, fork_point=fork_point)
    if as_json:
        echo_json(result.to_json())
        return
    echo(result.message)
    if result.new_commits:
        rate = result.new_commits / result.seconds if result.seconds else 0.0
        echo(f"{result.new_commits} commits in {result.seconds:.1f} s ({rate:.0f}/s)", err=True)


@click.command("forks")
@click.argument("name", required=False, type=TEXT)
@json_option
@click.pass_context
def forks(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """List forks with their commit counts (fork-only commits, and how many are already upstream)."""
    from kb.forks import list_forks

    found = list_forks(workspace(ctx).db(), name)
    if as_json:
        echo_json([f.to_json() for f in found])
        return
    if not found:
        echo("no forks yet (autoresearch kb add-fork NAME URL|PATH)")
        return
    echo_table(
        ["name", "branch", "commits", "upstreamed", "files", "head", "fork point", "found by", "url"],
        [
            [
                f.name,
                f.branch,
                f.commits,
                f.upstreamed,
                f.files,
                f.head[:12],
                f.merge_base[:12],
                f.fork_point.get("method", "merge-base"),
                f.url,
            ]
            for f in found
        ],
    )


@click.command("commits")
@click.argument("name", type=TEXT)
@click.option("--path", "path", help="Only commits touching this file or folder (e.g. ggml/src/ggml-cpu/).")
@json_option
@click.pass_context
def commits(ctx: click.Context, name: str, path: str | None, as_json: bool) -> None:
    """List a fork's fork-only commits, oldest first: sha, subject, files, upstreamed."""
    from kb.forks import list_commits

    found = list_commits(workspace(ctx).db(), name, path)
    if as_json:
        echo_json([c.to_json() for c in found])
        return
    if not found:
        echo(f"no commits in fork {name}" + (f" touching {path}" if path else ""))
        return
    echo_table(
        ["id", "sha", "up", "+/-", "files", "subject"],
        [
            [
                c.evidence_id,
                c.sha[:12],
                "yes" if c.upstreamed else "",
                f"+{c.insertions} -{c.deletions}",
                _files(c.files),
                c.subject[:70],
            ]
            for c in found
        ],
    )


def _files(files: list[str]) -> str:
    if not files:
        return ""
    first = files[0] if len(files[0]) <= 40 else "…" + files[0][-39:]
    return first + (f" +{len(files) - 1}" if len(files) > 1 else "")
