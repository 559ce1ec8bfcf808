"""What a coding agent may do with a workspace: the MCP server's tools as plain functions.

Each method reads or writes through the functions the CLI's commands call, so an agent meets the
same checks and the same words as a person at the terminal: `queue_patch` is `queue add`
(runner/submit.py: the patch-path policy, the baseline, the same change twice), `start_run` starts
the very `autoresearch run --detach` the console starts (tui/spawn.py: one run per workspace, the
validation gate) and returns its run id at once, `stop_run` and `steer_run` are `autoresearch steer`
(runner/commands.py). Reads return the JSON the CLI prints with `--json`.

No MCP here (tui/agents/server.py wraps these in the SDK): a refusal is a UserError, which the
server turns into the tool's one-line error (tui/errors.py). Each call opens its own database
connection (the SDK runs sync tools in worker threads) and the workspace's config is read again,
so an edit of autoresearch.toml is seen by the next call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from kb.errors import UserError
from kb.workspace import Workspace, find_workspace
from tui.spawn import RunRequest, Spawner, cli_argv, log_name, spawn_detached, wait

RUN_START_SECONDS = 60.0
"""How long `start_run` waits for `run --detach` to name its run (it waits 20 s for the runner)."""
STEER_WAIT_SECONDS = 5.0
"""How long a steering call waits for the runner's answer (as `autoresearch steer`)."""


class AgentFace:
    """The tools over one workspace. `read_only`: the write methods refuse (the server does not
    even offer them); `spawner` starts `autoresearch` processes (tests may watch them)."""

    def __init__(self, root: Path, *, read_only: bool = False, spawner: Spawner = spawn_detached) -> None:
        self.root = root
        self.read_only = read_only
        self.spawner = spawner

    # --- plumbing -------------------------------------------------------------------------------

    def workspace(self) -> Workspace:
        ws = find_workspace(self.root)
        ws.settings  # noqa: B018 (loads and validates: a bad config is every tool's one-line error)
        return ws

    @contextmanager
    def db(self) -> Iterator[sqlite_utils.Database]:
        db = self.workspace().db()
        try:
            yield db
        finally:
            db.conn.close()

    def database(self) -> Path | None:
        """The database file, for the one-line text of an SQLite failure."""
        try:
            return find_workspace(self.root).db_path
        except UserError:
            return None

    def _writing(self, what: str) -> None:
        if self.read_only:
            raise UserError(f"{what}: this server is read-only (started with --read-only)")

    # --- reads ----------------------------------------------------------------------------------

    def search(self, query: str, kind: str | None = None, limit: int = 10) -> dict[str, Any]:
        """`kb search --json`: evidence best first, each with the id to cite."""
        from kb.search import search

        if not query.strip():
            raise UserError("query: must not be empty")
        with self.db() as db:
            hits = search(db, query, kind=kind, limit=limit)
        return {"query": query, "results": [h.to_json() for h in hits]}

    def evidence(self, evidence_id: int) -> dict[str, Any]:
        """`kb show --json`: one evidence item in full, with its source."""
        from kb.search import get_evidence

        with self.db() as db:
            return get_evidence(db, evidence_id).to_json()

    def hypotheses(
        self,
        *,
        status: str | None = None,
        outcome: str | None = None,
        origin: str | None = None,
        path: str | None = None,
        search: str | None = None,
        sort: str = "rank",
        limit: int = 50,
        offset: int = 0,
    ) -> dict[str, Any]:
        """`hypotheses list --json`, one page: the queue in the order the runner takes it."""
        from kb.store.queue import QueueFilter, queue_page

        flt = QueueFilter(status, outcome, origin, path, None, search, sort)
        with self.db() as db:
            page = queue_page(db, flt, offset=offset, limit=limit)
        return {
            "total": page.total,
            "offset": page.offset,
            "remaining": page.remaining,
            "hypotheses": [r.to_json() for r in page.rows],
        }

    def hypothesis(self, hypothesis_id: int) -> dict[str, Any]:
        """`hypotheses show --json`: rationale, cited evidence, patches, rank, outcome."""
        from runner.hypotheses import details

        with self.db() as db:
            return details(db, hypothesis_id)

    def history(self, run: str | None = None) -> dict[str, Any]:
        """Every run (one line each), or one run with its waves, experiments and decisions
        (`history --json` without the raw samples)."""
        from runner.record import history as hist

        with self.db() as db:
            if run is None:
                return {"runs": [r.to_json() for r in hist.runs(db)]}
            return hist.run_json(db, hist.find_run(db, run), with_samples=False)

    def decision(self, experiment_id: int) -> dict[str, Any]:
        """One experiment's decision: status and what it means, effect, interval, pairs, why; every
        look of the sequential test. A speed-up is claimed only when `status` is `kept`."""
        from kb.vocabulary import STATUS_MEANINGS
        from runner.record import history as hist

        with self.db() as db:
            exp = hist.experiment(db, experiment_id)
            looks = hist.decisions(db, experiment_id, include_redecide=False)
            run = hist.find_run(db, exp.run_id)
        d = exp.decision
        return {
            **exp.to_json(),
            "meaning": STATUS_MEANINGS.get(exp.status, ""),
            "decided": exp.finished,
            "metric": d.metric if d else run.metric,
            "direction": run.direction,
            "why": d.reason if d else None,
            "decision": d.to_json() if d else None,
            "looks": len(looks),
        }

    def provenance(self, experiment_id: int | None = None, commit: str | None = None) -> dict[str, Any]:
        """The chain of an experiment (or of a winner commit): winner, decision, patch, hypothesis,
        evidence and their sources."""
        from runner.record.provenance import experiment_for_commit, provenance

        if (experiment_id is None) == (commit is None):
            raise UserError("provenance: give an experiment id or a winner commit (one of them)")
        with self.db() as db:
            eid = experiment_id if experiment_id is not None else experiment_for_commit(db, commit or "")
            return provenance(db, eid)

    def run_status(self, run: str | None = None) -> dict[str, Any]:
        """A run as the database says now (the run going, else the latest; or `run`): whether a
        runner drives it, its phase, budget and spend, each experiment with its status and decision,
        the winners so far. Cheap: poll it while a run goes."""
        from dataclasses import asdict

        from kb.db import now
        from kb.store import runs
        from runner.record import history as hist

        with self.db() as db:
            run_id = hist.find_run(db, run).id if run is not None else runs.current_run_id(db)
            if run_id is None:
                raise UserError("no runs yet: start one (start_run, or autoresearch run)")
            status = runs.run_status(db, run_id)
            info = hist.find_run(db, run_id)
            exps = hist.experiments(db, run_id)
            winners = hist.winners(db, run_id)
        assert status is not None
        stamp = now()
        return {
            **asdict(status),
            "live": status.runner_live(stamp),
            "heartbeat_age": status.heartbeat_age(stamp),
            "stop_meaning": status.stop_meaning,
            "budget": info.budget,
            "noise_floor": info.noise_floor,
            "self_test": info.self_test,
            "baseline_commit": info.baseline_commit,
            "head_commit": info.head_commit,
            "branch": info.branch,
            "experiments": [e.to_json() for e in exps],
            "winners": winners,
        }

    def profile(self) -> dict[str, Any]:
        """Where the benchmark spends its time on the baseline, as recorded (`PROFILE` lines read by
        `autoresearch validate`): {symbol: share}; empty when the benchmark prints none."""
        from runner.harness.patchpaths import baseline_of
        from runner.profile import load

        ws = self.workspace()
        _, base = baseline_of(ws)
        with self.db() as db:
            shares = load(db, base)
        ordered = dict(sorted(shares.items(), key=lambda kv: -kv[1]))
        return {"baseline": base, "symbols": ordered}

    def report(self, run: str) -> str:
        """A run's report (markdown, without the plot)."""
        from runner.record.report import markdown

        ws = self.workspace()
        with self.db() as db:
            return markdown(db, run, ws.reports_dir)

    # --- writes ---------------------------------------------------------------------------------

    def add_hypothesis(
        self,
        title: str,
        *,
        evidence_ids: Sequence[int] = (),
        sources: Sequence[str] = (),
        rationale: str = "",
        expected_effect: float | None = None,
    ) -> dict[str, Any]:
        """`hypotheses add --json`: a `proposed` hypothesis citing its evidence."""
        from runner.submit import propose

        self._writing("add_hypothesis")
        added = propose(
            self.workspace(),
            title,
            evidence_ids=evidence_ids,
            sources=sources,
            rationale=rationale,
            expected_effect=expected_effect,
            origin="agent",
        )
        return added.to_json()

    def queue_patch(
        self,
        *,
        title: str | None = None,
        diff: str | None = None,
        worktree: str | None = None,
        hypothesis_id: int | None = None,
        sources: Sequence[str] = (),
        rationale: str = "",
        priority: float = 0.0,
        unchecked: bool = False,
    ) -> dict[str, Any]:
        """`queue add --json`: a patch (`diff`, or the change of the agent's `worktree` against the
        baseline) for a new hypothesis titled `title`, or for `hypothesis_id`."""
        from kb import gitrepo
        from runner.harness.patchpaths import baseline_of
        from runner.submit import queue_patch

        self._writing("queue_patch")
        if (diff is None) == (worktree is None):
            raise UserError("queue_patch: give a diff or a worktree (one of them)")
        ws = self.workspace()
        label = "patch"
        if worktree is not None:
            path = Path(worktree).expanduser()
            if not path.is_absolute():
                raise UserError(f"worktree {worktree}: give an absolute path")
            _, base = baseline_of(ws)
            diff = gitrepo.worktree_diff(path, base)
            label = f"worktree {path}"
            if not diff.strip():
                raise UserError(f"{label}: no change against the baseline {base[:12]}; nothing queued")
        assert diff is not None
        queued = queue_patch(
            ws,
            diff,
            label=label,
            title=title,
            sources=sources,
            rationale=rationale,
            priority=priority,
            unchecked=unchecked,
            hypothesis_id=hypothesis_id,
            origin="agent",
            author=f"agent:{Path(worktree).name}" if worktree else "agent",
            by="mcp",
        )
        return {**queued.to_json(), "baseline": queued.baseline}

    def start_run(self, request: RunRequest) -> dict[str, Any]:
        """Start `autoresearch run --detach --json` (or `--resume`) as the console does and return
        its run id, pid and log as soon as the runner has named its run. Refusals (a run going, the
        queue empty, validation required) are the command's own line."""
        self._writing("start_run")
        argv = cli_argv(self.root, *request.args())
        log_path = log_name(self.root, "run", face="mcp")
        proc = self.spawner(argv, cwd=self.root, log_path=log_path)
        result = wait(proc, argv, log_path, timeout=RUN_START_SECONDS)
        if result.returncode is None:
            raise UserError(
                f"start_run: the runner did not name its run within {RUN_START_SECONDS:g} s "
                f"(pid {result.pid}; log {log_path}); see run_status"
            )
        if result.returncode != 0 or result.data is None:
            line = result.tail.removeprefix("Error: ") or f"exit status {result.returncode}"
            raise UserError(line)
        return {**result.data, "started_by": str(log_path)}

    def stop_run(self, wait_seconds: float = STEER_WAIT_SECONDS) -> dict[str, Any]:
        """`steer stop`: cancel what runs and finish the run (stop_reason user)."""
        return self.steer_run("stop", {}, wait_seconds)

    def steer_run(
        self, kind: str, args: dict[str, Any], wait_seconds: float = STEER_WAIT_SECONDS
    ) -> dict[str, Any]:
        """`steer KIND --json`: focus/avoid (args text), approval (args on), pause, resume, stop."""
        from runner.commands import steer

        self._writing(f"steer {kind}")
        with self.db() as db:
            sent = steer(db, kind, args, wait_seconds)
        refused = sent.refusal()
        if refused is not None:
            raise UserError(refused)
        return sent.to_json()
