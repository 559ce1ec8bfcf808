"""The research phase reads new literature: the model's search queries go to discovery
(kb/papers/discover.py: arXiv, OpenAlex or Semantic Scholar) as well as to the local search, and
the first unseen papers are ingested (HTML or PDF, the usual ingestion) before the local search
runs, so their passages are evidence the model sees and can cite like any other.

When: `run --discover/--no-discover`, else `kb.discovery.enabled` (auto: when the source's API can
be reached; off when offline or AUTORESEARCH_OFFLINE is set). How much: `kb.discovery.per_query`
candidates asked per query, at most `per_phase` papers ingested per phase and `per_run` per run (the
run's earlier phases counted from its research log). What was found, with its query and source, is
kept in the phase's report (`discovered`, in its `research_done` event: the research log), and a
rate limit ends the phase's discovery with its one-line reason among the phase's failures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kb.errors import UserError
from kb.store.research_log import papers_read
from kb.textsafe import quoted
from runner.research_io import ResearchReport, ResearchRequest

if TYPE_CHECKING:
    import sqlite_utils

    from kb.workspace import Workspace


def discovery_state(ws: Workspace, wanted: bool | None) -> tuple[bool, str]:
    """(on, why) for this phase: the run's flag, else the setting; `auto` asks the network."""
    from kb.papers.discover import offline_reason

    kb = ws.settings.kb
    source = kb.discovery.source
    if wanted is False:
        return False, "off (--no-discover)"
    if wanted is None and kb.discovery.enabled == "off":
        return False, "off (kb.discovery.enabled = off)"
    if wanted is None and kb.discovery.enabled == "auto":
        reason = offline_reason(kb, source)
        if reason is not None:
            return False, f"off: offline ({reason})"
    why = "--discover" if wanted else f"kb.discovery.enabled = {kb.discovery.enabled}"
    return True, f"on ({source}, {why})"


class Reader:
    """Called with the model's queries before the local search (runner.research.generate)."""

    def __init__(
        self,
        ws: Workspace,
        db: sqlite_utils.Database,
        req: ResearchRequest,
        report: ResearchReport,
        say: Callable[[str], None],
    ) -> None:
        self.ws, self.db, self.req, self.report, self.say = ws, db, req, report, say

    def __call__(self, queries: list[str]) -> None:
        on, why = discovery_state(self.ws, self.req.discover)
        self.report.discovery = why
        if not on:
            return
        settings = self.ws.settings.kb
        left_in_run = settings.discovery.per_run - papers_read(self.db, self.req.run_id)
        budget = min(settings.discovery.per_phase, left_in_run)
        if budget <= 0:
            caps = settings.discovery
            self.report.discovery += (
                f"; nothing read: the caps are reached (per phase {caps.per_phase}, per run {caps.per_run})"
            )
            return
        from kb.papers.discover import RateLimited, discover
        from kb.papers.ingest import add_paper

        for query in queries:
            if budget <= 0:
                break
            try:
                found = discover(self.db, query, settings, limit=settings.discovery.per_query)
            except RateLimited as exc:
                self.report.failures.append(f"discovery: {exc}")
                return
            except UserError as exc:
                self.report.failures.append(f"discovery for {query!r}: {exc}")
                continue
            for cand in found.candidates:
                if budget <= 0:
                    break
                if cand.known is not None or cand.location is None:
                    continue
                entry = {"query": query, "source": found.source, "title": cand.title}
                try:
                    result = add_paper(self.db, cand.location, settings, known=cand.keys())
                except UserError as exc:
                    self.report.discovered.append(
                        {**entry, "status": "error", "paper": None, "message": str(exc)}
                    )
                    continue
                self.report.discovered.append(
                    {**entry, "status": result.status, "paper": result.source_id, "message": result.message}
                )
                if result.status == "added":
                    budget -= 1
                    where = f"query {quoted(query)}, {found.source}"
                    self.say(f"  read {quoted(cand.title)} ({where}): paper {result.source_id}")
