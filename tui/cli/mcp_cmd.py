"""`autoresearch mcp`: the workspace served to coding agents over the Model Context Protocol.

The MCP SDK is imported inside the command only (tui/agents/server.py), so `autoresearch --help`
and every other command start as fast as before.
"""

from __future__ import annotations

import click

from tui.cli.common import echo

TOKEN_ENV = "AUTORESEARCH_MCP_TOKEN"


@click.command("mcp")
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="With --http: port."
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    help=f"With --http: the token clients must send (default: ${TOKEN_ENV}, else a random one, printed).",
)
@click.option(
    "--read-only", is_flag=True, help="Serve only the reads: no hypothesis, patch, run or steering."
)
@click.option(
    "--skill", is_flag=True, help="Print the skill (SKILL.md) for agents that read skills, and exit."
)
@click.pass_context
def cli(ctx: click.Context, http: bool, port: int, token: str | None, read_only: bool, skill: bool) -> None:
    """Serve this workspace to coding agents (Claude Code, Codex, pi, ...) over MCP.

    Tools read the knowledge base (search, evidence), the queue, the history and each experiment's
    decision and provenance; and, unless --read-only, add hypotheses that cite evidence, queue
    patches (a diff or the agent's work tree) under the same checks as `queue add`, start a run
    (it returns at once; one run per workspace), poll it, stop and steer it. docs/agents.md has the
    lines to add it to each agent.

    stdio by default (the agent starts this command). With --http it listens on 127.0.0.1:PORT/mcp
    and answers only requests with its token (Authorization: Bearer TOKEN), from no foreign page
    (Origin) and on its own names (Host); reach it from elsewhere through an SSH tunnel.
    """
    if skill:
        from tui.agents.skill import skill_text

        echo(skill_text(), nl=False)
        return
    from kb.locate import workspace_root
    from kb.workspace import find_workspace
    from tui.agents.face import AgentFace
    from tui.agents.server import build

    obj = ctx.find_root().obj
    root = workspace_root(obj.get("workspace") if isinstance(obj, dict) else None)
    find_workspace(root).settings  # noqa: B018 (a bad workspace is refused now, not at the first call)
    server = build(AgentFace(root, read_only=read_only))
    if not http:
        server.run("stdio")
        return
    from tui.agents.http import HOST, PATH, serve
    from tui.webguard import new_token

    mode = "read-only" if read_only else "reads and writes"
    echo(f"serving MCP ({mode}) on http://{HOST}:{port}{PATH} (ctrl+c stops)", err=True)
    if not token:  # one of its own: printed once, here
        token = new_token()
        echo(f"token: {token} (send it as Authorization: Bearer TOKEN)", err=True)
    serve(server, port=port, token=token)
