"""The patch writer: a model turns a hypothesis into a unified diff that applies to the baseline.

For each hypothesis without a usable patch (none yet, or a fork patch that conflicts with the
baseline even with a three-way merge: `needs_port`), the model gets the hypothesis, its evidence and
the relevant target files (those the evidence names, and those a search of the baseline tree finds
for the identifiers involved), and answers with a diff. To port a fork commit it also gets the fork's
diff and each function the commit changes, as the fork has it and as the baseline has it
(runner/research/port.py). The diff is checked with `git apply --check` against the baseline; on failure the
error and the current text around the failing lines go back to the model, up to N attempts. A diff
touching a protected path (benchmark, checks, `target.protect`) is refused: the hypothesis becomes
`unpatchable` with the reason in its notes.

A repair (the autopilot's) is the same conversation with the failed attempt added: its diff and the
relevant excerpt (the apply error, the compiler's last lines, the failing check's last lines). The
new patch names the one it repairs and the experiment that failed (patches.repair_of,
from_experiment). A patch that stopped applying after a winner (the runner's `conflict`) is ported
the way a fork commit is: the same change, against the new baseline.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import sqlite_utils
from pydantic import BaseModel, Field

from kb.config import Settings
from kb.db import log_event, transaction
from kb.errors import UserError
from kb.store import hypotheses as hypothesis_store
from kb.store import research as store
from runner import prompting
from runner.harness import patchpaths
from runner.harness.patchpaths import protected_paths, refusal
from runner.hypotheses import add_note, add_patch, diff_files, evidence_of, get, latest_patch, set_status
from runner.research.port import PortContext, port_context
from runner.research.prompt_sizes import FULL, MAX_FILE_CHARS, MAX_SHRINKS, WINDOW_LINES, Sizes

if TYPE_CHECKING:
    import git

    from kb.workspace import Workspace
    from runner.llm import LLMClient

DEFAULT_ATTEMPTS = 3


class PatchAnswer(BaseModel):
    summary: str = Field(max_length=800, description="One or two sentences: what the patch changes and why.")
    diff: str = Field(
        description="A unified diff (git diff format, paths a/... b/... relative to the repository "
        "root) that applies to the baseline files shown; several files are fine."
    )


@dataclass
class PatchOutcome:
    hypothesis_id: int
    status: str
    """patched, unpatchable (refused or no diff applied), failed (the model failed), skipped."""
    patch_id: int | None = None
    attempts: int = 0
    reason: str = ""
    call_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Repair:
    """A failed attempt handed back to the model."""

    patch_id: int
    experiment_id: int
    stage: str
    """does_not_apply, build, checks."""
    excerpt: str


REPAIR_WHAT = {
    "does_not_apply": "did not apply to the baseline",
    "build": "did not build",
    "checks": "built, but the checks script failed on it",
}


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def _is_header(lines: list[str], k: int) -> bool:
    line = lines[k]
    return bool(
        line.startswith("diff --git ")
        or _HUNK.match(line)
        or (line.startswith("--- ") and k + 1 < len(lines) and lines[k + 1].startswith("+++ "))
    )


def recount(diff: str) -> str:
    """Fix the line counts of hunk headers (models miscount them; git apply rejects a wrong count).

    A blank line inside a hunk is taken as a context line whose leading space was lost; the other
    body lines are kept exactly as written. The result ends with a newline."""
    lines = diff.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not _is_header(lines, j):
            if lines[j] == "":
                k = j
                while k < len(lines) and lines[k] == "":
                    k += 1
                if k == len(lines) or _is_header(lines, k) or lines[k][:1] not in (" ", "+", "-", "\\"):
                    break  # blank lines after the hunk, not inside it
            body.append(lines[j] or " ")
            j += 1
        old = sum(1 for line in body if line[:1] in (" ", "-"))
        new = sum(1 for line in body if line[:1] in (" ", "+"))
        out.append(f"@@ -{match.group(1)},{old} +{match.group(3)},{new} @@{match.group(5)}")
        out.extend(body)
        i = j
    return "\n".join(out).strip("\n") + "\n"


def _check_answer(answer: PatchAnswer) -> None:
    if not diff_files(answer.diff):
        raise ValueError("diff: not a unified diff (no '--- a/...' / '+++ b/...' file headers)")
    if "@@" not in answer.diff and "rename from" not in answer.diff:
        raise ValueError("diff: no hunks (no '@@ -a,b +c,d @@' lines)")


def pending(
    db: sqlite_utils.Database, settings: Settings, *, require_approval: bool | None = None
) -> list[int]:
    """Hypotheses the patch writer should work on, in the queue order: allowed to run (or waiting as
    `needs_port`; with hypotheses.require_approval, once a person approved it), and without a patch
    that applies."""
    from kb.store.queue import unpatched_ids

    strict = settings.hypotheses.require_approval if require_approval is None else require_approval
    statuses: tuple[str, ...] = ("approved",) if strict else ("approved", "proposed", "needs_port")
    return unpatched_ids(db, statuses)


def _window(text: str, line: int, around: int = WINDOW_LINES) -> str:
    lines = text.splitlines()
    start, end = max(0, line - 1 - around), min(len(lines), line + around)
    return f"[lines {start + 1}-{end} of {len(lines)}]\n" + "\n".join(lines[start:end])


def _excerpt(text: str, terms: list[str], context: int = 30, limit: int = MAX_FILE_CHARS) -> str:
    """A big file cut down to windows around its most telling lines, in file order, to about
    `limit` characters.

    A line scores by the terms it mentions, each weighted by how rare it is in the file, so a line
    naming `rms_norm` beats one of a hundred lines that merely say `mul`."""
    if len(text) <= limit:
        return text
    context = max(3, min(context, limit // 400))  # a small budget shows more, narrower windows
    lines = text.splitlines()
    lowered = [line.lower() for line in lines]
    counts = {t: sum(1 for line in lowered if t in line) for t in {t.lower() for t in terms}}
    weights = {t: 1.0 / n for t, n in counts.items() if n}
    scored = sorted(
        ((sum(w for t, w in weights.items() if t in line), i) for i, line in enumerate(lowered)),
        key=lambda item: (-item[0], item[1]),
    )
    chosen: list[tuple[int, int]] = []
    used = 0
    for score, i in scored:
        if score <= 0 or used >= limit:
            break
        lo, hi = max(0, i - context), min(len(lines), i + context + 1)
        if any(lo < b and a < hi for a, b in chosen):
            continue  # already shown
        chosen.append((lo, hi))
        used += sum(len(line) + 1 for line in lines[lo:hi])
    if not chosen:
        chosen = [(0, min(len(lines), 200, max(10, limit // 80)))]
    parts = [
        f"[lines {lo + 1}-{hi} of {len(lines)}]\n" + "\n".join(lines[lo:hi]) for lo, hi in sorted(chosen)
    ]
    return "\n...\n".join(parts)


@dataclass
class _Context:
    files: dict[str, str]
    """Target files to change: path -> text (or excerpt) at the baseline."""
    references: list[tuple[str, str]]
    """Read-only excerpts (other backends' kernels): (label, text)."""
    terms: list[str]
    port: PortContext | None = None
    """For a fork commit to port: its functions in the fork and in the baseline."""


def gather_files(
    db: sqlite_utils.Database,
    repo: git.Repo,
    baseline: str,
    hypothesis_id: int,
    settings: Settings,
    protected: list[tuple[str, str]],
    sizes: Sizes = FULL,
) -> _Context:
    """The target files relevant to a hypothesis: those its evidence names (fork commit files that
    exist at the baseline), then those a `git grep` of the baseline finds for its identifiers."""
    from kb import gitrepo

    hyp = hypothesis_store.stored(db, hypothesis_id)
    evidence_ids = evidence_of(db, hypothesis_id)
    titles = " ".join(title or "" for title in store.evidence_titles(db, evidence_ids))
    terms = prompting.code_terms(hyp["title"] if hyp else "", titles, hyp["rationale"] if hyp else "")
    wanted: dict[str, None] = {}
    for ev_id in evidence_ids:
        for path in store.commit_paths(db, ev_id):
            wanted.setdefault(path, None)
    patch = latest_patch(db, hypothesis_id)
    if patch is not None:
        for path in diff_files(patch["diff"]):
            wanted.setdefault(path, None)
    references: list[tuple[str, str]] = []
    for f in store.fusion_sites(db, evidence_ids, 3):
        text = gitrepo.show_file(repo, baseline, f["file"])
        if text is not None:
            where = f"{f['backend']}: {f['file']}:{f['line']}"
            references.append((where, _window(text, int(f["line"]), sizes.window_lines)))
    reference_files = {label.split(": ", 1)[1].rsplit(":", 1)[0] for label, _ in references}
    if terms:
        found = gitrepo.grep_count(repo, baseline, terms, settings.target.paths_of_interest or None)
        ranked = sorted(found.items(), key=lambda item: (-len(item[1]), -sum(item[1].values()), item[0]))
        for path, _ in ranked:
            if path not in reference_files:
                wanted.setdefault(path, None)
    port = None
    if patch is not None and patch["apply_status"] == "conflict":
        port = port_context(repo, baseline, patch, diff_files(patch["diff"]))
        # The baseline files that define the functions to port come first (they may have moved).
        wanted = dict.fromkeys([*port.baseline_paths, *wanted])
    files: dict[str, str] = {}
    for path in wanted:
        if len(files) >= sizes.files:
            break
        if refusal([path], protected):
            continue
        text = gitrepo.show_file(repo, baseline, path)
        if text is not None:
            files[path] = _excerpt(text, terms, limit=sizes.file_chars)
    return _Context(files=files, references=references, terms=terms, port=port)


def _messages(
    db: sqlite_utils.Database,
    hypothesis_id: int,
    ctx: _Context,
    settings: Settings,
    nonce: str,
    protected: list[tuple[str, str]],
    sizes: Sizes = FULL,
) -> list[dict[str, str]]:
    hyp = hypothesis_store.stored(db, hypothesis_id)
    assert hyp is not None
    evidence, _ = prompting.evidence_blocks(
        db, evidence_of(db, hypothesis_id), nonce, per_item=sizes.evidence_item, total=sizes.evidence_total
    )
    system = (
        "You are a performance engineer writing one patch for the target repository. Answer with a "
        "unified diff in `git diff` format (--- a/path, +++ b/path, @@ hunks with exact context "
        "lines copied from the files shown), relative to the repository root, that applies with "
        "`git apply` to the baseline files shown. Change only what the hypothesis needs; keep every "
        "existing code path correct (keep scalar fallbacks when adding SIMD code); several files are "
        f"fine. Never touch these protected paths: {', '.join(p for p, _ in protected) or '(none)'}.\n\n"
        + prompting.rules(nonce)
    )
    parts = [
        f"Hypothesis {hyp['id']}: {hyp['title']}",
        f"Rationale: {hyp['rationale']}",
        f"Expected effect on {settings.metric.primary}: {hyp['expected_effect']}",
    ]
    patch = latest_patch(db, hypothesis_id)
    if patch is not None and patch["apply_status"] == "conflict":
        parts.append(
            "A patch exists (from a fork, or written against an earlier baseline) but does not apply "
            "to the baseline. Rebase it: produce the same change against the baseline files shown.\n"
            + prompting.block(nonce, "original-patch", prompting.clip(patch["diff"], sizes.patch_chars))
            + "\n"
            + prompting.block(nonce, "git-apply-error", patch["apply_error"] or "")
        )
        if ctx.port is not None and ctx.port.functions:
            parts.append(
                "The functions the fork commit changes, as the fork has them after the commit and as the "
                "baseline has them now (port the change into the baseline's version):\n"
                + "\n\n".join(
                    prompting.block(
                        nonce,
                        "fork-function" if label.startswith("fork") else "baseline-function",
                        prompting.clip(text, sizes.function_chars),
                        location=label.split(": ", 1)[1],
                    )
                    for label, text in ctx.port.functions
                )
            )
        if ctx.port is not None and ctx.port.missing:
            parts.append(
                "The baseline defines none of these (new in the fork, or renamed): "
                + ", ".join(ctx.port.missing)
            )
    if evidence:
        parts.append("Evidence:\n" + evidence)
    for label, text in ctx.references:
        parts.append(
            "Reference implementation in another backend (read only, do not patch):\n"
            + prompting.block(nonce, "reference", text, location=label)
        )
    if ctx.files:
        parts.append(
            "Target files at the baseline (excerpts are marked with their line ranges):\n"
            + "\n\n".join(prompting.block(nonce, "file", text, path=path) for path, text in ctx.files.items())
        )
    else:
        parts.append("No target file was found for this hypothesis; name the files you change.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def _failing_context(repo: git.Repo, baseline: str, error: str) -> str:
    """The baseline text around the lines git apply complained about (`patch failed: path:line`)."""
    from kb import gitrepo

    parts = []
    for path, line in re.findall(r"patch failed: (\S+?):(\d+)", error)[:3]:
        text = gitrepo.show_file(repo, baseline, path)
        if text is not None:
            parts.append(f"{path} {_window(text, int(line), 25)}")
    for path in re.findall(r"error: (\S+?): does not exist in index", error)[:3]:
        parts.append(f"{path} does not exist at the baseline")
    return "\n\n".join(parts)


def _unpatchable(db: sqlite_utils.Database, outcome: PatchOutcome, reason: str) -> PatchOutcome:
    with transaction(db):
        set_status(db, outcome.hypothesis_id, "unpatchable")
        add_note(db, outcome.hypothesis_id, f"unpatchable: {reason}")
        log_event(db, "patch.unpatchable", f"hypothesis {outcome.hypothesis_id}: {reason}", level="warning")
    outcome.status = "unpatchable"
    outcome.reason = reason
    return outcome


def write_patch(
    ws: Workspace,
    db: sqlite_utils.Database,
    client: LLMClient,
    hypothesis_id: int,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    baseline: str | None = None,
    repair: Repair | None = None,
    step: str | None = None,
    from_experiment: int | None = None,
) -> PatchOutcome:
    """One hypothesis: ask, check, feed errors back; returns what happened (never half-applied).

    `repair`: a failed attempt to correct (the hypothesis keeps its status). `step`: a prefix for
    the model calls' step keys (runner/llm.py), so a resumed research phase reuses stored answers.
    `from_experiment`: the experiment this patch answers (a port after a `conflict`)."""
    from kb import gitrepo
    from runner.llm import BudgetExceeded, ContextExceeded, LLMError

    settings = ws.settings
    base = baseline or settings.target.baseline_commit or settings.target.baseline
    repo = gitrepo.open_repo(ws.mirror_path)
    hyp = get(db, hypothesis_id)
    outcome = PatchOutcome(hypothesis_id=hypothesis_id, status="failed")
    if hyp.status in ("rejected", "unpatchable"):
        outcome.status, outcome.reason = "skipped", hyp.status
        return outcome
    current = latest_patch(db, hypothesis_id)
    if repair is None and current is not None and current["apply_status"] != "conflict":
        outcome.status, outcome.reason = "skipped", f"has patch {current['id']}"
        return outcome
    nonce = prompting.new_nonce()
    protected = protected_paths(ws, settings)

    def first_messages(sizes: Sizes) -> list[dict[str, str]]:
        ctx = gather_files(db, repo, base, hypothesis_id, settings, protected, sizes)
        messages = _messages(db, hypothesis_id, ctx, settings, nonce, protected, sizes)
        if repair is not None:
            failed = store.patch_diff(db, repair.patch_id)
            messages[-1]["content"] += (
                f"\n\nAn earlier patch for this hypothesis {REPAIR_WHAT.get(repair.stage, 'failed')} "
                f"(experiment {repair.experiment_id}). Correct it: keep the idea, fix what failed.\n"
                + prompting.block(nonce, "failed-patch", prompting.clip(failed or "", sizes.patch_chars))
                + "\n"
                + prompting.block(
                    nonce, f"{repair.stage}-output", prompting.clip(repair.excerpt, sizes.output_chars)
                )
            )
        return messages

    sizes = Sizes.fit(client.prompt_chars())
    messages = first_messages(sizes)
    previous = current["id"] if current is not None and (repair is not None or from_experiment) else None
    last_error = ""
    shrunk = 0
    for _ in range(attempts):
        outcome.attempts += 1
        try:
            result = client.complete_structured(
                "repair" if repair is not None else "patch",
                messages,
                PatchAnswer,
                hypothesis_id=hypothesis_id,
                validate=_check_answer,
                step=f"{step}:a{outcome.attempts}" if step else None,
            )
        except ContextExceeded as exc:
            # Ask again from the start with less of everything: to the window the server named (the
            # client keeps it for later prompts), and at least a third smaller than what did not fit.
            if shrunk >= MAX_SHRINKS:
                outcome.reason = str(exc)
                return outcome
            shrunk += 1
            smaller = int(sum(len(m["content"]) for m in messages) * 2 / 3)
            sizes = Sizes.fit(min(client.prompt_chars() or smaller, smaller))
            messages = first_messages(sizes)
            last_error = str(exc)
            continue
        except LLMError as exc:
            outcome.reason = str(exc)
            with transaction(db):
                log_event(db, "patch.failed", f"hypothesis {hypothesis_id}: {exc}", level="error")
            if isinstance(exc, BudgetExceeded):
                raise  # a spent budget stops the whole batch, not just this hypothesis
            return outcome
        outcome.call_ids.append(result.call_id)
        diff = recount(result.value.diff)
        files = diff_files(diff)
        try:
            refused = patchpaths.check(diff, protected, repo, base)
        except patchpaths.PatchUnreadable:
            refused = None  # git cannot read it: apply_check below says why, and the model retries
        if refused:
            if repair is not None:  # a repair that turns hostile ends the repairs, not the idea's record
                outcome.status, outcome.reason = "failed", f"the model's repair {refused}"
                return outcome
            return _unpatchable(db, outcome, f"the model's patch {refused}")
        error = gitrepo.apply_check(repo, base, diff)
        if error is None:
            with transaction(db):
                patch_id = add_patch(
                    db,
                    hypothesis_id,
                    diff,
                    author_kind="llm",
                    author=client.config.model,
                    llm_call_id=result.call_id,
                    apply_status="ok",
                    base_commit=base,
                    repair_of=previous,
                    from_experiment=repair.experiment_id if repair is not None else from_experiment,
                )
                log_event(
                    db,
                    "patch.written",
                    f"hypothesis {hypothesis_id}: patch {patch_id} "
                    f"({', '.join(files)}) after {outcome.attempts} attempt(s)",
                )
            outcome.status, outcome.patch_id, outcome.reason = "patched", patch_id, ""
            return outcome
        last_error = error
        with transaction(db):
            log_event(
                db,
                "patch.does_not_apply",
                f"hypothesis {hypothesis_id} attempt {outcome.attempts}: {error.splitlines()[0][:200]}",
                level="warning",
                data={"llm_call_id": result.call_id, "error": error[:2000]},
            )
        around = _failing_context(repo, base, error)
        messages = [
            *result.messages,
            {
                "role": "user",
                "content": "`git apply --check` on the baseline rejected that diff:\n"
                + prompting.block(nonce, "git-apply-error", error)
                + ("\nThe baseline text there:\n" + prompting.block(nonce, "file", around) if around else "")
                + "\nReply with a corrected JSON object whose diff applies exactly.",
            },
        ]
    first = last_error.splitlines()[0] if last_error else "no diff"
    if repair is not None:
        outcome.reason = f"no repair applied in {attempts} attempts ({first[:200]})"
        return outcome
    return _unpatchable(
        db, outcome, f"no diff applied to the baseline in {attempts} attempts ({first[:200]})"
    )


def write_patches(
    ws: Workspace,
    db: sqlite_utils.Database,
    client: LLMClient,
    hypothesis_ids: list[int] | None = None,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    baseline: str | None = None,
) -> list[PatchOutcome]:
    """Patches for the given hypotheses (default: every pending one). Stops at a spent budget and
    reports the rest as skipped; any other model failure affects only its own hypothesis."""
    from runner.llm import BudgetExceeded

    ids = hypothesis_ids if hypothesis_ids else pending(db, ws.settings)
    for hid in ids:
        get(db, hid)  # unknown ids fail before any model call
    outcomes: list[PatchOutcome] = []
    for index, hid in enumerate(ids):
        try:
            outcomes.append(write_patch(ws, db, client, hid, attempts=attempts, baseline=baseline))
        except BudgetExceeded as exc:
            outcomes.append(PatchOutcome(hid, "failed", reason=str(exc)))
            outcomes.extend(
                PatchOutcome(rest, "skipped", reason="llm budget reached") for rest in ids[index + 1 :]
            )
            break
        except UserError as exc:
            outcomes.append(PatchOutcome(hid, "failed", reason=str(exc)))
    return outcomes
