"""A hypothesis's sources as short refs and readable lines: what winner commits, patch headers and
provenance cite.

Source refs are short strings used in commit trailers, patch headers and JSON alike:
`https://...` (a paper), `passage:<evidence id>` (a passage of it), `fork:<name>@<sha>` (a fork
commit), `gap:<evidence id>` (a backend fusion gap), `note:<text>`, `evidence:<id>` (anything else),
`postmortem:<run>/wave<N>` (the post-mortem of the wave the research phase read when it proposed it).
Below runner.record.history (whose experiments list their sources) and the winners and provenance
modules, importing none of them.
"""

from __future__ import annotations

import sqlite_utils

from kb.jsoncol import decoded_dict, decoded_list
from kb.store import provenance as store
from kb.store.provenance import CitedEvidence, SuggestingWave


def one_line(text: str) -> str:
    return " ".join(text.split())


def suggesting_wave(db: sqlite_utils.Database, hypothesis_id: int) -> SuggestingWave | None:
    """The wave whose post-mortem the autopilot read when it proposed this hypothesis, if any."""
    return store.suggesting_wave(db, hypothesis_id)


def evidence_rows(db: sqlite_utils.Database, hypothesis_id: int) -> list[CitedEvidence]:
    return store.evidence_rows(db, hypothesis_id)


def evidence_refs(ev: CitedEvidence) -> list[str]:
    kind = ev["kind"]
    if kind == "passage":
        url = ev["canonical_url"] or ev["source_url"]
        return [*([url] if url else []), f"passage:{ev['id']}"]
    if kind == "commit":
        name = ev["source_name"] or ev["canonical_url"] or ev["source_url"] or f"source{ev['source_id']}"
        return [f"fork:{name}@{ev['commit_sha'] or ev['ref']}"]
    if kind in ("fusion", "gap", "single_op"):
        return [f"gap:{ev['id']}"]
    return [f"evidence:{ev['id']}"]


def location(ev: CitedEvidence) -> str:
    """Where to look: URL with section, repo@sha with files, or file:line@sha."""
    meta = decoded_dict(ev["meta"])
    if ev["kind"] == "passage":
        url = ev["canonical_url"] or ev["source_url"] or ""
        where = f" section {ev['section']!r}" if ev["section"] else ""
        return f"{url}{where} passage {ev['ref']}".strip()
    if ev["kind"] == "commit":
        repo = ev["canonical_url"] or ev["source_url"] or ev["source_name"] or ""
        files = decoded_list(ev["commit_files"])
        shown = f" ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})" if files else ""
        return f"{repo}@{ev['commit_sha'] or ev['ref']}{shown}"
    if ev["fusion_file"]:
        at = f"@{ev['fusion_commit'][:12]}" if ev["fusion_commit"] else ""
        return f"{ev['fusion_file']}:{ev['fusion_line']}{at}"
    if isinstance(meta, dict) and meta.get("file"):
        line = f":{meta['line']}" if meta.get("line") else ""
        return f"{meta['file']}{line}"
    return ev["canonical_url"] or ev["source_url"] or ev["source_name"] or ""


def source_refs(db: sqlite_utils.Database, hypothesis_id: int | None) -> list[str]:
    """Every source ref of a hypothesis: the free-form ones as given, then those of its evidence."""
    if hypothesis_id is None:
        return []
    found: dict[str, None] = {}
    for ref in store.free_refs(db, hypothesis_id):
        found.setdefault(one_line(ref), None)
    for ev in evidence_rows(db, hypothesis_id):
        for ref in evidence_refs(ev):
            found.setdefault(ref, None)
    wave = suggesting_wave(db, hypothesis_id)
    if wave is not None:
        found.setdefault(f"postmortem:{one_line(wave['run_name'])}/wave{wave['number']}", None)
    return list(found)


def source_details(db: sqlite_utils.Database, hypothesis_id: int | None) -> list[str]:
    """Human-readable source lines: each free-form ref, then each evidence with what and where."""
    if hypothesis_id is None:
        return []
    found: dict[str, None] = {}
    for ref in store.free_refs(db, hypothesis_id):
        found.setdefault(one_line(ref), None)
    for ev in evidence_rows(db, hypothesis_id):
        what = one_line(ev["commit_subject"] or ev["title"] or ev["source_title"] or "")
        where = location(ev)
        detail = " - ".join(part for part in (what, where) if part)
        found.setdefault(f"{' '.join(evidence_refs(ev))}{'  ' + detail if detail else ''}", None)
    wave = suggesting_wave(db, hypothesis_id)
    if wave is not None:
        note = f" (note {wave['reflection_evidence_id']})" if wave["reflection_evidence_id"] else ""
        found.setdefault(
            f"postmortem:{one_line(wave['run_name'])}/wave{wave['number']}  suggested by the post-mortem "
            f"of wave {wave['number']} of run {one_line(wave['run_name'])}{note}",
            None,
        )
    return list(found)
