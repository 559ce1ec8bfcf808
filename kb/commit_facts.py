"""What a fork commit touches and claims, recorded when it is mined so the queue can rank and filter.

    facts = commit_facts(files, message, backend_map)
    facts.backends   # ["cpu"]: compute backends its files belong to (the inventory's rules)
    facts.areas      # ["backend", "docs"]: backend, core, model, app, server, web, python, tests,
                     #  build, ci, docs, other
    facts.claims     # [Claim(effect=0.3, metric="pp", text="30% faster PP", how="text")]

Claims are the speed-ups a message states, each with the metric it names when it names one: `pp`
(prompt processing, prefill, `pp512`), `tg` (token generation, decode, `tg128`), or None. Sentences
("12% faster", "a 1.3x speedup for TG") and benchmark tables (rows named `pp512` / `tg128` with two
t/s columns or a speed-up column, as ik_llama.cpp writes them) are read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kb.jsoncol import decoded_list
from kb.vocabulary import AREAS

if TYPE_CHECKING:
    from kb.inventory.layout import BackendMap, HistoryBackends

MAX_EFFECT = 10.0
"""Larger claimed factors are typos or toy cases; they are kept out of the record."""

_WEB_EXT = (".html", ".htm", ".css", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".vue", ".svelte", ".html.gz")
_DOC_EXT = (".md", ".rst", ".adoc")
_BUILD_NAMES = {"CMakeLists.txt", "Makefile", "CMakePresets.json", "flake.nix", "flake.lock", "Package.swift"}
_BUILD_EXT = (".cmake", ".mk", ".nix", ".gradle", ".in")


@dataclass(frozen=True)
class Claim:
    effect: float
    """Relative gain, 0.3 = +30% (a factor of 1.3)."""
    metric: str | None
    """pp, tg, or None when the text names no metric."""
    text: str
    how: str
    """text (a stated gain), rates (before and after t/s) or table (a benchmark table row)."""


@dataclass(frozen=True)
class CommitFacts:
    backends: list[str] = field(default_factory=list)
    areas: list[str] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)

    def claims_json(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.claims]


def area_of(path: str, backend: str | None) -> str:
    """The area of the project a path belongs to (one rule for every fork commit)."""
    if backend:
        return "backend"
    name = path.rsplit("/", 1)[-1]
    top = path.split("/", 1)[0]
    lower = path.lower()
    if top in (".github", ".devops", "ci") or name.startswith("Dockerfile"):
        return "ci"
    if lower.endswith(_DOC_EXT) or top in ("docs", "media") or name in ("LICENSE", "AUTHORS", "CODEOWNERS"):
        return "docs"
    if name in _BUILD_NAMES or lower.endswith(_BUILD_EXT) or top == "cmake" or "/cmake/" in path:
        return "build"
    if lower.endswith(_WEB_EXT) or "/webui/" in path or "/public" in path:
        return "web"
    if lower.endswith(".py") or top in ("gguf-py", "requirements") or name.startswith("requirements"):
        return "python"
    if top == "tests" or "/tests/" in path:
        return "tests"
    if "/server/" in path or top == "server":
        return "server"
    if top == "ggml":
        return "core"
    if top in ("src", "include"):
        return "model"
    if top in ("examples", "tools", "common", "pocs", "scripts"):
        return "app"
    return "other"


def commit_facts(
    files: Iterable[str], message: str, backends: BackendMap | HistoryBackends | None
) -> CommitFacts:
    touched: set[str] = set()
    areas: set[str] = set()
    for path in files:
        backend = backends.backend_of(path) if backends is not None else None
        if backend:
            touched.add(backend)
        areas.add(area_of(path, backend))
    return CommitFacts(sorted(touched), [a for a in AREAS if a in areas], parse_claims(message))


# --- claims ------------------------------------------------------------------------------------------

_NUMBER = r"(\d+(?:\.\d+)?)"
_GAIN_WORDS = r"(?:faster|speed-?ups?|improvements?|better|gains?|higher|increase|boost|quicker)"
_PERCENT = re.compile(
    rf"{_NUMBER}\s*%\s*{_GAIN_WORDS}|(?:speed-?up|faster|improv\w*|gain|boost)\D{{0,20}}?{_NUMBER}\s*%"
    rf"|(?<![\w.])\+\s*{_NUMBER}\s*%",
    re.IGNORECASE,
)
_FACTOR = re.compile(
    rf"{_NUMBER}\s*[xX×](?![\w.])\s*(?:\(!\)\s*)?(?:{_GAIN_WORDS}|for|in|on)\b"
    rf"|(?:speed-?up|faster)\s+(?:of\s+|by\s+)?(?:about\s+|up\s+to\s+|~)?{_NUMBER}\s*[xX×](?![\w.])",
    re.IGNORECASE,
)
# Before and after: "168 t/s up from 137 t/s", "60 -> 64 t/s", "from 26 t/s to 31 t/s", "143 t/s vs 137 t/s".
_RATE = r"\s*(?:t/s|tok/s|tokens/s)"
_RATES = re.compile(
    rf"(?P<after>\d+(?:\.\d+)?){_RATE}\s*,?\s*(?:up\s+|down\s+)?(?:from|vs\.?|versus)\s+(?P<before>\d+(?:\.\d+)?)"
    rf"|(?P<before2>\d+(?:\.\d+)?)(?:{_RATE})?\s*(?:->|→)\s*(?P<after2>\d+(?:\.\d+)?){_RATE}"
    rf"|from\s+(?P<before3>\d+(?:\.\d+)?){_RATE}\s+to\s+(?P<after3>\d+(?:\.\d+)?){_RATE}",
    re.IGNORECASE,
)
_PP = re.compile(r"\bpp[-\s]?\d*\b|prompt[- ]processing|\bprefill", re.IGNORECASE)
_TG = re.compile(r"\btg[-\s]?\d*\b|token[- ]generation|\bdecod\w*", re.IGNORECASE)
_TEST_CELL = re.compile(r"^(pp|tg)\s?\d+\b", re.IGNORECASE)
_FLOAT = re.compile(r"^[-+]?\d+(?:\.\d+)?(?:\s*±\s*\d+(?:\.\d+)?)?$")


def _metric(text: str, start: int, end: int) -> str | None:
    """The metric named nearest to text[start:end] in a sentence (None when it names none)."""

    def gap(m: re.Match[str]) -> int:
        return max(start - m.end(), m.start() - end, 0)

    named = [(gap(m), "pp") for m in _PP.finditer(text)] + [(gap(m), "tg") for m in _TG.finditer(text)]
    return min(named)[1] if named else None


def _sentence(text: str, start: int, end: int) -> tuple[str, int]:
    """The sentence or line holding text[start:end], and where the match starts within it."""
    left = max(text.rfind(". ", 0, start) + 1, text.rfind("\n", 0, start) + 1, 0)
    stops = [i for i in (text.find(". ", end), text.find("\n", end)) if i >= 0]
    right = min(stops) if stops else len(text)
    sentence = text[left:right]
    stripped = sentence.lstrip()
    return stripped.rstrip(), start - left - (len(sentence) - len(stripped))


def parse_claims(message: str) -> list[Claim]:
    """Speed-ups stated in a commit message, each with the metric its sentence or table row names."""
    claims: list[Claim] = []
    for pattern, factor in ((_PERCENT, False), (_FACTOR, True)):
        for m in pattern.finditer(message):
            number = float(next(g for g in m.groups() if g))
            value = number - 1 if factor else number / 100
            sentence, at = _sentence(message, m.start(), m.end())
            if 0 < value <= MAX_EFFECT:
                metric = _metric(sentence, at, at + m.end() - m.start())
                claims.append(Claim(round(value, 4), metric, sentence[:200], "text"))
    for m in _RATES.finditer(message):
        after = float(m.group("after") or m.group("after2") or m.group("after3"))
        before = float(m.group("before") or m.group("before2") or m.group("before3"))
        value = after / before - 1 if before > 0 else 0.0
        sentence, at = _sentence(message, m.start(), m.end())
        if 0 < value <= MAX_EFFECT:
            metric = _metric(sentence, at, at + m.end() - m.start())
            claims.append(Claim(round(value, 4), metric, sentence[:200], "rates"))
    claims.extend(_table_claims(message))
    # A sentence that names no metric is about the one the subject line names, if it names one.
    subject = message.split("\n", 1)[0]
    pp, tg = bool(_PP.search(subject)), bool(_TG.search(subject))
    if pp != tg:
        default = "pp" if pp else "tg"
        claims = [c if c.metric else Claim(c.effect, default, c.text, c.how) for c in claims]
    return claims


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_claims(message: str) -> list[Claim]:
    """Rows of markdown benchmark tables: `| model | ... | pp512 | 100.1 ± 1 | 130.2 ± 2 | 1.30 |`.

    A column headed speed-up/ratio gives the factor; else the last two columns headed t/s are before
    and after (higher is better). A table with one t/s column compares nothing."""
    out: list[Claim] = []
    header: list[str] = []
    for line in message.splitlines():
        if "|" not in line:
            header = []
            continue
        cells = _cells(line)
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the |---|---| line
        test = next((c for c in cells if _TEST_CELL.match(c)), None)
        if test is None:
            header = [c.lower() for c in cells]
            continue
        factor = _row_factor(cells, header)
        if factor is not None and 0 < factor - 1 <= MAX_EFFECT:
            metric = _TEST_CELL.match(test)
            assert metric is not None
            out.append(Claim(round(factor - 1, 4), metric.group(1).lower(), line.strip()[:200], "table"))
    return out


def _row_factor(cells: list[str], header: list[str]) -> float | None:
    for i, name in enumerate(header):
        if i < len(cells) and re.search(r"speed-?up|ratio", name):
            m = re.match(r"^(\d+(?:\.\d+)?)", cells[i])
            return float(m.group(1)) if m else None
    rates = [i for i, name in enumerate(header) if "t/s" in name and i < len(cells)]
    if len(rates) < 2:
        return None  # one t/s column: a plain llama-bench table, no comparison
    before, after = (cells[i] for i in rates[-2:])
    if not (_FLOAT.match(before) and _FLOAT.match(after)):
        return None
    old, new = float(before.split("±")[0]), float(after.split("±")[0])
    return new / old if old > 0 else None


# --- which claim speaks to the metric being optimised ------------------------------------------------

CAPPED_EFFECT = 0.3
"""A claim is taken as the expected effect up to this (a +300% toy case is not a plan)."""
UNNAMED_WEIGHT = 0.6
"""A claim that names no metric may be about the primary one: it counts, with this weight."""
OTHER_WEIGHT = 0.15
"""A claim about another metric (a `pp` gain while `tg` is optimised) says little about the primary."""


def metric_kind(name: str) -> str | None:
    """`pp` or `tg` when a metric's name says which llama-bench test it is (`pp512`, `tg128`,
    `prompt_processing`, `decode_tps`), else None (a project whose metric is `throughput`)."""
    spaced = re.sub(r"[_.]", " ", name)
    pp, tg = bool(_PP.search(spaced)), bool(_TG.search(spaced))
    return None if pp == tg else ("pp" if pp else "tg")


def claim_weight(claim: Claim, primary: str | None) -> float:
    """How much a claim says about the primary metric (its kind from `metric_kind`): 1 for a claim on
    it (or on anything, when the primary is of no known kind), less for one naming no metric, little
    for one on another metric."""
    if primary is None or claim.metric == primary:
        return 1.0
    return UNNAMED_WEIGHT if claim.metric is None else OTHER_WEIGHT


def best_claim(claims: Iterable[Claim], primary: str | None) -> Claim | None:
    """The claim that best supports a gain of the primary metric (weight, then effect), or None."""
    scored = [(claim_weight(c, primary), c.effect, i, c) for i, c in enumerate(claims)]
    return max(scored, key=lambda s: (s[0] * min(s[1], CAPPED_EFFECT), -s[2]))[3] if scored else None


def expected_effect(claims: Iterable[Claim], primary: str | None) -> float | None:
    """The gain of the primary metric a commit claims (capped), or None: a claim about another metric
    is no claim about this one (a +30% `pp` is not +30% on `tg`)."""
    kept = [c for c in claims if claim_weight(c, primary) > OTHER_WEIGHT]
    best = best_claim(kept, primary)
    return None if best is None else min(best.effect, CAPPED_EFFECT)


def claims_from_json(value: Any) -> list[Claim]:
    """`commits.claims` as stored (a JSON list of {effect, metric, text, how}) back to Claims."""
    out = []
    for item in decoded_list(value):
        if isinstance(item, dict) and isinstance(item.get("effect"), int | float):
            metric = item.get("metric")
            out.append(
                Claim(
                    float(item["effect"]),
                    metric if metric in ("pp", "tg") else None,
                    str(item.get("text") or ""),
                    str(item.get("how") or "text"),
                )
            )
    return out


# --- the functions a diff touches -------------------------------------------------------------------

_HUNK_CONTEXT = re.compile(r"^@@ [^@\n]* @@ ?(.*)$", re.MULTILINE)
_CALL_NAME = re.compile(r"([A-Za-z_][\w]*(?:::~?[A-Za-z_]\w*)*)\s*\(")
_DECL_NAME = re.compile(
    r"(?:struct|class|union|enum|namespace)\s+([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(?:\[|=|\{)"
)
# A top-level definition on a changed line: `+static void foo(int n) {`, `-template <int N> int bar(`.
_DEFINITION = re.compile(
    r"^[+-](?![+-])(?!\s)(?!#)(?:[\w:<>,*&~]+[ \t]+)+\**([A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*)\s*\([^;]*$",
    re.MULTILINE,
)
_NOT_NAMES = frozenset(
    {"if", "for", "while", "switch", "return", "sizeof", "defined", "catch", "__attribute__", "decltype",
     "static_assert", "alignas", "alignof", "typedef", "else", "do", "case", "define", "GGML_UNUSED"}
)  # fmt: skip


def context_name(context: str) -> str | None:
    """The function (or struct, table) a hunk header's context line names: `static void
    ggml_compute_forward_mul_mat(` -> `ggml_compute_forward_mul_mat`."""
    for m in _CALL_NAME.finditer(context):
        name = m.group(1)
        if name.rsplit("::", 1)[-1] not in _NOT_NAMES:
            return name
    decl = _DECL_NAME.search(context)
    if decl:
        name = decl.group(1) or decl.group(2)
        return None if name in _NOT_NAMES else name
    return None


def touched_functions(diff: str, limit: int = 200) -> list[str]:
    """Names of the functions a unified diff changes, in order: those its hunk headers name (git puts
    the enclosing function there) and those defined on its changed lines."""
    seen: dict[str, None] = {}
    for m in _HUNK_CONTEXT.finditer(diff):
        name = context_name(m.group(1))
        if name:
            seen.setdefault(name, None)
    for m in _DEFINITION.finditer(diff):
        name = m.group(1)
        if name.rsplit("::", 1)[-1] not in _NOT_NAMES:
            seen.setdefault(name, None)
        if len(seen) >= limit:
            break
    return list(seen)[:limit]


def base_name(symbol: str) -> str:
    """A profiler's symbol as the function name a diff shows: arguments, template arguments, a clone
    suffix and namespaces dropped (`ns::mul_mat<4>(int) [clone .lto]` -> `mul_mat`)."""
    text = symbol.split(" [", 1)[0].strip()
    depth, out = 0, []
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    name = "".join(out).strip().split()[-1] if "".join(out).strip() else text
    return name.rsplit("::", 1)[-1].split(".", 1)[0] or text
