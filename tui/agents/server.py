"""The MCP server: the agent face's functions (face.py) as tools, a run's report and the skill as
resources, the protocol as a prompt. The only module that imports the MCP SDK (`mcp`), and only
`autoresearch mcp` imports it: `autoresearch --help` never pays for it.

Tools are typed (their JSON schema comes from the signatures below) and documented (their
docstrings and argument descriptions are what the agent reads). A refusal is the tool's one-line
error (tui/errors.py decides which failures are lines), never a traceback; a bug is logged with its
traceback on the server's stderr and the agent reads only that the tool failed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from kb.search import SearchKind
from tui.agents.face import AgentFace
from tui.agents.skill import protocol_text, skill_text
from tui.errors import user_line
from tui.spawn import RunRequest

F = TypeVar("F", bound=Callable[..., Any])

INSTRUCTIONS = """\
autoresearch: a lab that measures whether a patch really speeds up the target, with paired
statistics on the same machine, and keeps only what a decision says is real. Read first (search
the knowledge base, show the evidence), cite evidence ids in what you propose, queue your patch
(a diff or your worktree), start a run, poll run_status, and read the decision. Never claim a
speed-up the decision has not kept. The prompt `protocol` and the resource autoresearch://skill
say it in full."""

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADD = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
CONTROL = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)

WRITE_TOOLS = ("add_hypothesis", "queue_patch", "start_run", "stop_run", "steer_run")
"""Served unless --read-only."""

RunRef = Annotated[
    str | None, Field(description="A run id or name (default: the run going, else the latest).")
]
Limit = Annotated[int, Field(ge=1, le=1000, description="At most this many results.")]
RowId = Annotated[int, Field(ge=1, le=2**63 - 1)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


async def one_line_errors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """A failed tool call's text as one line: the SDK reports arguments that fail the tool's
    schema as pydantic's several lines (field, message, a link); the agent reads one."""
    result = await call_next(ctx)
    if ctx.method != "tools/call" or not isinstance(result, dict) or not result.get("isError"):
        return result
    content = [
        {**block, "text": one_line(block["text"])} if isinstance(block.get("text"), str) else block
        for block in result.get("content", [])
    ]
    return {**result, "content": content}


def one_line(text: str) -> str:
    """'... 1 validation error for xArguments / field / message [type=...] / link' ->
    '... invalid arguments: field: message'; any other text's lines joined by '; '."""
    lines = [line for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.strip().startswith("For further information")]
    if len(lines) <= 1:
        return text.strip()
    head = re.sub(r"\d+ validation errors? for \w+$", "invalid arguments", lines[0].strip())
    parts: list[str] = []
    field: str | None = None
    for line in lines[1:]:
        if line.startswith(" "):
            message = re.sub(r"\s*\[type=[^\]]*\]$", "", line.strip())
            parts.append(f"{field}: {message}" if field else message)
            field = None
        else:
            if field:
                parts.append(field)
            field = line.strip()
    if field:
        parts.append(field)
    return f"{head}: {'; '.join(parts)}"


def _version() -> str:
    try:
        return importlib.metadata.version("autoresearch")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def build(face: AgentFace) -> MCPServer:
    """The server over `face`'s workspace; with `face.read_only`, only the reads."""
    server: MCPServer = MCPServer(
        "autoresearch",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",
        middleware=[one_line_errors],
    )

    def one_line(fn: F) -> F:
        """A UserError (and the like) becomes the tool's one-line error."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                line = user_line(exc, face.database)
                if line is None:
                    raise  # a bug: logged with its traceback, the agent reads "Error executing tool"
                raise ToolError(line) from None

        return wrapper  # type: ignore[return-value]

    def tool(annotations: ToolAnnotations) -> Callable[[F], F]:
        def register(fn: F) -> F:
            server.add_tool(one_line(fn), annotations=annotations)
            return fn

        return register

    # --- reads ----------------------------------------------------------------------------------

    @tool(READ)
    def search_knowledge(
        query: Annotated[
            str,
            Field(
                description='Words, matched literally (identifiers included); "a phrase", prefix*, '
                "and OR between terms are understood."
            ),
        ],
        kind: Annotated[SearchKind | None, Field(description="Only this kind of evidence.")] = None,
        limit: Limit = 10,
    ) -> dict[str, Any]:
        """Search the knowledge base (paper passages, fork commits, backend fusion gaps, notes),
        best first. Each result's `id` is the evidence id to read with show_evidence and to cite."""
        return face.search(query, kind, limit)

    @tool(READ)
    def show_evidence(evidence_id: RowId) -> dict[str, Any]:
        """One piece of evidence in full, with its source: a paper passage (title, URL, section), a
        fork commit (repository, sha, message, diff), a fusion gap (file:line)."""
        return face.evidence(evidence_id)

    @tool(READ)
    def list_hypotheses(
        status: Annotated[
            Literal["proposed", "approved", "rejected", "patched", "unpatchable", "needs_port"] | None,
            Field(description="Only this status."),
        ] = None,
        outcome: Annotated[
            str | None,
            Field(description="Only those whose latest experiment ended so (kept, discarded, ...; none)."),
        ] = None,
        origin: Annotated[str | None, Field(description="miner:fork, miner:gap, llm, manual, agent")] = None,
        path: Annotated[str | None, Field(description="A file or folder the patch touches.")] = None,
        search: Annotated[str | None, Field(description="Words in the title, rationale or evidence.")] = None,
        sort: Literal["rank", "priority", "recent", "effect"] = "rank",
        limit: Limit = 50,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> dict[str, Any]:
        """The hypothesis queue in the order the runner takes it, filtered and paged: status,
        outcome (its latest experiment's status), rank, patch, evidence count."""
        return face.hypotheses(
            status=status,
            outcome=outcome,
            origin=origin,
            path=path,
            search=search,
            sort=sort,
            limit=limit,
            offset=offset,
        )

    @tool(READ)
    def show_hypothesis(hypothesis_id: RowId) -> dict[str, Any]:
        """One hypothesis: rationale, the evidence it cites with their sources, its patches, its
        rank and why, its outcome."""
        return face.hypothesis(hypothesis_id)

    @tool(READ)
    def history(run: RunRef = None) -> dict[str, Any]:
        """Past and live runs: without `run`, one line per run; with it, the run's waves,
        experiments (status, effect, interval, pairs) and winners."""
        return face.history(run)

    @tool(READ)
    def decision(experiment_id: RowId) -> dict[str, Any]:
        """One experiment's decision: `status` (kept = a real gain; discarded, inconclusive,
        checks_failed, crashed, refused, ...) and its meaning, `effect` on the primary metric,
        `ci` (the interval), `pairs` measured, `why` (the decision's reason). Only `kept` is a
        speed-up; an inconclusive effect is noise, whatever its sign."""
        return face.decision(experiment_id)

    @tool(READ)
    def provenance(
        experiment_id: Annotated[int | None, Field(ge=1, description="An experiment id.")] = None,
        commit: Annotated[str | None, Field(description="Or a winner commit sha (a unique prefix).")] = None,
    ) -> dict[str, Any]:
        """The provenance chain of an experiment or a winner commit: winner commit and patch file,
        decision, patch, hypothesis, and each piece of evidence with its source (URL, repo@sha,
        file:line)."""
        return face.provenance(experiment_id, commit)

    @tool(READ)
    def run_status(run: RunRef = None) -> dict[str, Any]:
        """A run as the database says now: status, whether a runner is live, phase, waves,
        budget and spend, stop reason, every experiment with its status and decision, winners.
        Cheap; poll it while a run goes (every 10-30 s is plenty)."""
        return face.run_status(run)

    @tool(READ)
    def profile() -> dict[str, Any]:
        """Where the benchmark spends its time on the baseline ({symbol: share}, from the
        benchmark's PROFILE lines recorded by `autoresearch validate`); empty when none."""
        return face.profile()

    # --- writes ---------------------------------------------------------------------------------

    if not face.read_only:

        @tool(ADD)
        def add_hypothesis(
            title: Annotated[str, Field(min_length=1, description="The change, in one line.")],
            evidence_ids: Annotated[
                list[Annotated[int, Field(ge=1)]],
                Field(description="Evidence ids it cites (from search_knowledge)."),
            ] = [],  # noqa: B006 (pydantic copies defaults)
            sources: Annotated[
                list[str],
                Field(description="Other refs: URL, fork:NAME@SHA, paper:ID, gap:ID, note:TEXT."),
            ] = [],  # noqa: B006
            rationale: Annotated[str, Field(description="Why it should help: what the evidence says.")] = "",
            expected_effect: Annotated[
                float | None, Field(allow_inf_nan=False, description="Expected gain, 0.05 for +5%.")
            ] = None,
        ) -> dict[str, Any]:
            """Propose a hypothesis citing its evidence (at least one evidence id or source). It
            waits as `proposed`; queue_patch with its id attaches your patch."""
            return face.add_hypothesis(
                title,
                evidence_ids=evidence_ids,
                sources=sources,
                rationale=rationale,
                expected_effect=expected_effect,
            )

        @tool(ADD)
        def queue_patch(
            title: Annotated[
                str | None, Field(description="What the patch does (a new hypothesis); or hypothesis_id.")
            ] = None,
            diff: Annotated[str | None, Field(description="A unified diff against the target.")] = None,
            worktree: Annotated[
                str | None,
                Field(
                    description="Or the absolute path of your git work tree of the target: its change "
                    "against the baseline (commits, edits and new files) is the patch."
                ),
            ] = None,
            hypothesis_id: Annotated[
                int | None, Field(ge=1, description="Queue it for this hypothesis (from add_hypothesis).")
            ] = None,
            sources: Annotated[
                list[str], Field(description="Provenance refs: evidence:ID, paper:ID, URL, note:TEXT.")
            ] = [],  # noqa: B006
            rationale: str = "",
            priority: Annotated[float, Field(allow_inf_nan=False, description="Higher runs first.")] = 0.0,
            unchecked: Annotated[
                bool, Field(description="Queue it even if it does not apply to the baseline today.")
            ] = False,
        ) -> dict[str, Any]:
            """Queue a patch for measurement, checked at once as `autoresearch queue add` checks it:
            a patch touching the benchmark, the checks or another protected path is refused, so is
            one that does not apply to the baseline (unless unchecked) or that already waits."""
            return face.queue_patch(
                title=title,
                diff=diff,
                worktree=worktree,
                hypothesis_id=hypothesis_id,
                sources=sources,
                rationale=rationale,
                priority=priority,
                unchecked=unchecked,
            )

        @tool(CONTROL)
        def start_run(
            max_experiments: Annotated[
                int | None, Field(ge=1, description="Candidate experiments at most.")
            ] = None,
            budget_minutes: Annotated[Positive | None, Field(description="Wall-clock budget.")] = None,
            budget_usd: Annotated[
                Positive | None, Field(description="Machines and model, in dollars.")
            ] = None,
            waves: Annotated[int | None, Field(ge=1, description="Stop after this many waves.")] = None,
            parallel: Annotated[int | None, Field(ge=1, description="Workers at once.")] = None,
            autopilot: Annotated[
                bool, Field(description="Research, patch and reflect between waves (needs a model).")
            ] = False,
            skip_self_test: Annotated[
                bool, Field(description="Do not measure the baseline against itself first.")
            ] = False,
            name: Annotated[str | None, Field(description="Run name (default: the start time).")] = None,
            resume: Annotated[bool, Field(description="Continue an interrupted run instead.")] = False,
            run: Annotated[int | None, Field(ge=1, description="With resume: which run.")] = None,
        ) -> dict[str, Any]:
            """Start a run of the queued patches (or resume one) in the background, as
            `autoresearch run --detach` does, and return its run id at once. One run per
            workspace: refused while one is going. Then poll run_status and read each decision."""
            request = RunRequest(
                name=name,
                waves=waves,
                parallel=parallel,
                budget_minutes=budget_minutes,
                budget_usd=budget_usd,
                max_experiments=max_experiments,
                skip_self_test=skip_self_test,
                autopilot=autopilot,
                resume=resume,
                run=run,
            )
            if resume and any(
                v is not None for v in (name, waves, parallel, budget_minutes, budget_usd, max_experiments)
            ):
                raise ToolError("resume: continues with the run's own options; give none of the limits")
            return face.start_run(request)

        @tool(CONTROL)
        def stop_run() -> dict[str, Any]:
            """Stop the going run: running experiments are cancelled, the run finishes (stop_reason
            user). Its decisions so far stay."""
            return face.stop_run()

        @tool(ADD)
        def steer_run(
            action: Annotated[
                Literal["focus", "avoid", "approval", "pause", "resume"],
                Field(
                    description="focus/avoid: a direction for the next research phase (text); "
                    "approval: whether generated hypotheses wait for a person (on); pause/resume."
                ),
            ],
            text: Annotated[str | None, Field(description="With focus or avoid.")] = None,
            on: Annotated[bool | None, Field(description="With approval.")] = None,
        ) -> dict[str, Any]:
            """Steer the going run as `autoresearch steer` does (focus, avoid and approval also wait
            for the next run when none is going)."""
            args: dict[str, Any] = {}
            if action in ("focus", "avoid"):
                args = {"text": text or ""}
            elif action == "approval":
                if on is None:
                    raise ToolError("approval: give on (true or false)")
                args = {"on": on}
            return face.steer_run(action, args)

    # --- resources and the prompt --------------------------------------------------------------

    @server.resource(
        "autoresearch://skill",
        name="skill",
        description="How to use this lab: the protocol, the tools, the CLI equivalents (SKILL.md).",
        mime_type="text/markdown",
    )
    def skill() -> str:
        return skill_text()

    @server.resource(
        "autoresearch://runs/{run}/report",
        name="report",
        description="A run's report (markdown): runs, waves, experiments with their decisions, the "
        "self-test noise floor, the final stack and ablation, the provenance of every winner.",
        mime_type="text/markdown",
    )
    def report(run: str) -> str:
        try:
            return face.report(run)
        except Exception as exc:
            line = user_line(exc, face.database)
            if line is None:
                raise
            raise ResourceError(line) from None

    @server.prompt(
        name="protocol",
        description="How to work with this lab honestly: read first, cite evidence, queue, let the "
        "runner decide, never claim a speed-up without a decision.",
    )
    def protocol(
        goal: Annotated[str, Field(description="What you want to speed up (optional).")] = "",
    ) -> str:
        return protocol_text(goal)

    # TODO(#24): a `brief` tool and an autoresearch://brief resource once the brief exists
    # (runner-side `autoresearch brief --json`); `profile` reads what is recorded today.
    return server
