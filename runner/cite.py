"""What a hand-written hypothesis cites: a `--source` ref resolved against the knowledge base.

`queue add --source` takes free-form refs (a URL, `fork:NAME@SHA`, `note:TEXT`) and refs into the
knowledge base, which become evidence links, so the provenance chain winner -> experiment -> patch
-> hypothesis -> evidence -> source holds for a patch written by hand:

- `evidence:ID`, `gap:ID`, `passage:ID`: that evidence row (any kind).
- `paper:ID`: the paper source ID; its first passage is linked, the ref becomes the paper's URL.
- `fork:NAME@SHA`: that commit of a fork in the knowledge base (a fork or commit it does not hold
  is refused: the ref would cite nothing).
- a paper's own URL or file address (`https://...`, `file:///...`, the path it was added from):
  the paper added from there; refs that name nothing in the knowledge base stay free-form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import sqlite_utils

from kb.errors import UserError
from kb.store import citations as store
from kb.store.tables import SourceRow

EVIDENCE_REF = re.compile(r"(evidence|gap|passage):(\d+)")
PAPER_REF = re.compile(r"paper:(\d+)")
FORK_REF = re.compile(r"fork:([^@\s]+)@([0-9a-fA-F]{4,64})")


@dataclass(frozen=True)
class Citation:
    ref: str
    """The ref as stored with the hypothesis (hypothesis_sources)."""
    evidence_ids: list[int] = field(default_factory=list)
    """Evidence rows to link (hypothesis_evidence)."""
    what: str = ""
    """What it points at, for the user ('passage 3 of "Title"')."""


def _paper(db: sqlite_utils.Database, source: SourceRow, ref: str) -> Citation:
    evidence = store.first_passage(db, source["id"])
    title = source["title"] or source["url"]
    return Citation(ref, [evidence] if evidence else [], f"paper {source['id']} {title!r}")


def _addresses(ref: str) -> list[str]:
    """The forms a paper's address may be stored in (as given, canonical URL, file path)."""
    forms = [ref]
    if ref.startswith("file://"):
        forms.append(unquote(urlsplit(ref).path))
    elif ref.startswith("/"):
        from pathlib import Path

        forms.append(Path(ref).as_uri())
    elif re.match(r"https?://", ref):
        from kb.papers import normalise_url

        forms.append(normalise_url(ref))
    return list(dict.fromkeys(forms))


def resolve(db: sqlite_utils.Database, ref: str) -> Citation:
    """A checked ref: a one-line UserError when it names a knowledge-base row that does not exist."""
    match = EVIDENCE_REF.fullmatch(ref)
    if match:
        row = store.evidence(db, int(match[2]))
        if row is None:
            raise UserError(f"--source {ref}: no such evidence id (see autoresearch kb search)")
        if match[1] == "gap" and row["kind"] != "gap":
            raise UserError(
                f"--source {ref}: evidence {row['id']} is a {row['kind']}, not a gap (use evidence:ID)"
            )
        label = row["title"] or row["source"] or ""
        return Citation(ref, [row["id"]], f"{row['kind']} {row['id']} {label!r}")
    match = PAPER_REF.fullmatch(ref)
    if match:
        source = store.paper(db, int(match[1]))
        if source is None:
            raise UserError(f"--source {ref}: no paper with this id (see autoresearch kb papers)")
        return _paper(db, source, str(source["canonical_url"] or source["url"] or ref))
    if ref.startswith("fork:"):
        return _fork_commit(db, ref)
    source = store.paper_at(db, _addresses(ref))
    if source is not None:
        return _paper(db, source, ref)
    if ref.startswith("file://"):
        raise UserError(f"--source {ref}: no paper was added from this file (autoresearch kb add-paper FILE)")
    return Citation(ref)


def _fork_commit(db: sqlite_utils.Database, ref: str) -> Citation:
    match = FORK_REF.fullmatch(ref)
    if match is None:
        raise UserError(f"--source {ref}: write fork:NAME@SHA (a fork of the knowledge base, a commit of it)")
    name, sha = match[1], match[2].lower()
    if not store.fork_known(db, name):
        raise UserError(f"--source {ref}: no fork {name!r} in the knowledge base (see autoresearch kb forks)")
    found = store.fork_commits(db, name, sha)
    if not found:
        raise UserError(
            f"--source {ref}: fork {name} has no commit {sha} (see autoresearch kb commits {name})"
        )
    if len(found) > 1:
        raise UserError(f"--source {ref}: {sha} names several commits of fork {name}; give more of the sha")
    row = found[0]
    return Citation(ref, [row["id"]], f"commit {row['id']} {row['title'] or ''!r}")
