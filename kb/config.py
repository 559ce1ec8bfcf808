"""Typed settings: `autoresearch.toml` in a workspace, validated with pydantic.

Every field has a default except the target; errors name the file, the key and the reason in one line.
Secrets (API keys) are never stored here: litellm reads them from the environment.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kb.errors import ConfigError, UserError
from kb.locate import CONFIG_NAME as CONFIG_NAME  # re-exported: callers know it from here
from kb.policy import MIN_VALUES, Policy

# Durations are capped where the OS's timers end (threading.TIMEOUT_MAX and select() overflow past
# a few hundred years) well before that: 30 days is longer than any build, benchmark or budget.
MAX_SECONDS = 30 * 86_400
MAX_INT = 2**63 - 1  # SQLite's INTEGER: counts and sizes are stored


class _Section(BaseModel):
    # strict: a TOML `true` is not the integer 1 and a string is not a number; allow_inf_nan: TOML
    # has `nan` and `inf`, and nan passes every ge/le bound. Attribute docstrings become field
    # descriptions: `dump_settings` writes their first sentence as the comment above each key, so
    # the file and the code say the same thing.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, use_attribute_docstrings=True)

    @field_validator("*")
    @classmethod
    def _storable(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ValueError(f"{value} is too large (at most {MAX_INT})")
        return value


class TargetSettings(_Section):
    path: str
    """The target repository: a local path or a git URL (cloned into the workspace mirror)."""
    baseline: str = "HEAD"
    """The baseline ref as the user gave it."""
    baseline_commit: str = ""
    """The baseline ref resolved to a full sha at init time."""
    build_cmd: str = "make -j$(nproc)"
    """Shell command that builds the target inside a tree (the template's BUILD_CMD)."""
    bench_script: str = "autoresearch.sh"
    """Benchmark script (path in the target tree, or in the workspace): prints METRIC lines."""
    checks_script: str = "autoresearch.checks.sh"
    """Correctness checks script: exits non-zero on any regression."""
    protect: list[str] = Field(default_factory=list)
    """Extra protected paths (files or folders): a patch touching one is refused."""
    paths_of_interest: list[str] = Field(default_factory=list)
    """Folders whose changes matter (fork commits outside them are not mined)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the build, benchmark and checks (e.g. AUTORESEARCH_GGUF=model path)."""

    @field_validator("protect")
    @classmethod
    def _protect(cls, value: list[str]) -> list[str]:
        return [tree_path(entry, "protect") for entry in value]


def tree_path(entry: str, key: str) -> str:
    """A path inside the target tree as git names it (`./speed.txt` and `speed.txt/` are
    `speed.txt`); one that names no path there (empty, `.`, spaces around it, absolute, `..`) is
    refused: it would protect nothing, or everything."""
    if entry != entry.strip():
        raise ValueError(f"{entry!r}: spaces around a path (git's names have none there; remove them)")
    if entry.startswith("/"):
        raise ValueError(f"{entry!r}: a path inside the target tree, relative to its top (not absolute)")
    parts = [part for part in entry.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{entry!r}: `..` leaves the target tree")
    if not parts:
        raise ValueError(f"{entry!r}: names the whole tree, not a path in it ({key} lists files or folders)")
    return "/".join(parts)


class GuardSettings(_Section):
    metric: str
    """A secondary metric the benchmark prints, which may not regress while the primary improves."""
    max_regression: float = Field(0.02, ge=0.0, lt=1.0)
    """Largest tolerated relative loss of this secondary metric (0.02 = 2%)."""


class MetricSettings(_Section):
    primary: str = "throughput"
    """The metric that decides keep or discard (a name from the benchmark's METRIC lines)."""
    direction: Literal["higher", "lower"] = "higher"
    """Which way is better: higher (throughput) or lower (time)."""
    unit: str = ""
    """The primary metric's unit, for reports (e.g. t/s, MB/s, ms)."""
    guards: list[GuardSettings] = Field(default_factory=list)
    """Secondary metrics that may not regress (`[[metric.guards]]` tables: metric, max_regression)."""
    wall_clock_guard: bool = False
    """For a benchmark that runs fixed work: a keep stands only when the harness's own wall-clock
    time per invocation (`harness.wall_s`, recorded for every benchmark) is significantly shorter
    too, so a candidate whose binary reports a faster clock than it runs is not kept."""

    @field_validator("primary")
    @classmethod
    def _name(cls, value: str) -> str:
        import re

        if not re.fullmatch(r"[\w.µ]+", value):
            raise ValueError(f"metric name {value!r} must match [\\w.µ]+")
        return value


class PolicySettings(_Section):
    """How experiments are judged. Its bounds are the statistics' own: the section is valid when
    kb.policy.Policy accepts it (the one rule for the config, `validate`, `run`, `redecide`)."""

    min_effect: float = 0.01
    """Smallest relative gain worth keeping (0.01 = 1%); `autoresearch validate` says what fits."""
    alpha: float = 0.05
    """Error rate: intervals at 1 - alpha; false keeps stay below alpha / 2 across the looks."""
    max_pairs: int = 80
    """The cap: an experiment still undecided after this many A/B pairs is inconclusive."""
    min_pairs: int = 8
    """Pairs before the first look (no verdict earlier)."""
    batch_pairs: int = 8
    """Pairs per job: one job on a worker runs a batch of pairs; more pairs is another job."""
    self_test_pairs: int = Field(8, ge=MIN_VALUES)
    """Pairs of the A/A self-test (the baseline against itself) before the first wave."""

    @model_validator(mode="after")
    def _judged_by_policy(self) -> PolicySettings:
        try:
            Policy(
                min_effect=self.min_effect,
                alpha=self.alpha,
                max_pairs=self.max_pairs,
                min_pairs=self.min_pairs,
                batch=self.batch_pairs,
            )
        except UserError as exc:
            raise ValueError(str(exc).replace("batch ", "batch_pairs ", 1)) from None
        return self


class SkyPilotSettings(_Section):
    infra: str = ""
    """SkyPilot infra, e.g. `aws`, `gcp/us-central1`, `kubernetes`, `slurm/<cluster>/<partition>`."""
    cpus: str = "4+"
    """CPUs per cluster, as SkyPilot reads it (`4+`: at least four)."""
    memory: str = ""
    """Memory per cluster in GB, as SkyPilot reads it (`16+`); empty: any."""
    accelerators: str = ""
    """Accelerators per cluster (`A100:1`); empty: none."""
    max_clusters: int = Field(2, ge=1)
    """Clusters of one run at once (the run's `parallel` is capped by it)."""
    price_per_hour: float | None = Field(None, ge=0.0)
    """Per-hour price override for infra that reports none (Slurm, Kubernetes)."""
    noise_limit: float = Field(0.10, gt=0.0)
    """A new worker whose A/A noise (per-sample CV) exceeds this is replaced."""
    qualify_pairs: int = Field(6, ge=3)
    """A/A pairs a new cluster runs (its first job, right after setup) before it takes experiments."""
    stagger_seconds: float = Field(20.0, ge=0.0, le=MAX_SECONDS)
    """Seconds between two cluster launches (clusters sharing a node race for SkyPilot's ports)."""
    idle_minutes: float = Field(5.0, ge=0.0, le=MAX_SECONDS / 60)
    """A qualified cluster idle this long while nothing of its run is queued is downed."""
    max_failures: int = Field(3, ge=1)
    """Launch or qualification failures in a row (no capacity, failed setup, too noisy) before the
    run stops launching and is interrupted with the last reason."""


class FleetSettings(_Section):
    backend: Literal["local", "skypilot"] = "local"
    """Where experiments run: `local` (processes on this machine) or `skypilot` (clusters)."""
    parallel: int = Field(2, ge=1)
    """Workers at once (local slots or clusters); locally, CPU-bound benchmarks should not share cores."""
    exclusive_pairs: bool = True
    """Local workers share this machine: each benchmark pair then runs alone on it (no other
    worker's build, checks or pair at the same time; builds and checks still overlap each other).
    Off: pairs of different workers may overlap (workers pinned to cores of their own, say), and
    whatever one does to the machine lands in the other's numbers."""
    wave_size: int = Field(0, ge=0)
    """Experiments per wave (0: as many as `parallel`). Every wave re-measures the current baseline."""
    template: str = ""
    """Experiment task template (a SkyPilot task YAML); empty: the packaged runner/harness/experiment.yaml.
    A relative path is read from the workspace. Patches may never touch it."""
    skypilot: SkyPilotSettings = Field(default_factory=SkyPilotSettings)
    """SkyPilot clusters (`fleet.backend = "skypilot"`)."""


class SandboxSettings(_Section):
    """How each build, benchmark and checks step is isolated (README: Threat model)."""

    mode: Literal["auto", "off", "required"] = "auto"
    """auto: the strongest isolation the worker allows, else none with a warning; required: a job
    on a worker that allows none fails (the run stops); off: no isolation."""
    method: Literal["auto", "uid", "userns"] = "auto"
    """uid: PID and mount namespaces as `user` (needs root); userns: the same in a user namespace
    (any user the kernel lets create one); auto: uid when the harness runs as root, else userns."""
    user: str = "nobody"
    """The unprivileged user the steps run as under the uid method."""

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if value.strip() in ("root", "0") or not value.strip():
            raise ValueError(f"{value!r}: the steps must run as an unprivileged user (e.g. nobody)")
        return value

    shared: list[str] = Field(default_factory=list)
    """Folders every build shares (caches): writable in the baseline's steps, read-only in the
    candidate's (ccache's folder is added when ccache is installed)."""
    expose: list[str] = Field(default_factory=list)
    """Folders or files the steps may read although they are hidden (under HOME or the workspace):
    a toolchain in ~/.local, say. Paths named by `target.env` are exposed read-only by themselves."""


class TimeoutSettings(_Section):
    build: int = Field(900, ge=1, le=MAX_SECONDS)
    """Seconds one build of one tree may take (the whole process group is killed after it)."""
    bench: int = Field(300, ge=1, le=MAX_SECONDS)
    """Seconds one call of the benchmark script may take."""
    check: int = Field(300, ge=1, le=MAX_SECONDS)
    """Seconds the checks script may take."""


class LLMSettings(_Section):
    model: str = ""
    """Any litellm model string; empty means no LLM (miners only)."""
    api_base: str = ""
    """API base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8080/v1); empty: the provider's."""
    budget_usd: float = Field(5.0, ge=0.0)
    """LLM spending cap in dollars: no model call is made once it is reached."""
    timeout: float = Field(120.0, gt=0.0, le=MAX_SECONDS)
    """Seconds one model call may take, all of it: connecting, the answer's headers and body, and
    every retry with the waits between (one deadline, as a paper's fetch has)."""
    max_retries: int = Field(3, ge=0, le=100)
    """Retries of a failed call (rate limits, server errors), with backoff."""
    temperature: float = Field(0.2, ge=0.0, le=2.0)
    """Sampling temperature of every call."""
    max_tokens: int | None = Field(None, ge=1)
    """Cap on one answer's tokens (unset: the provider's default). An answer cut off at the cap is
    invalid and asked again, then the call fails."""
    structured_output: Literal["json_schema", "prompt"] = "json_schema"
    """json_schema: also send the answer's schema as `response_format`, so servers that support it
    (OpenAI, llama-server, vLLM) constrain decoding to it; litellm drops it for providers that do not.
    prompt: only describe the schema in the system message."""
    context_tokens: int | None = Field(None, ge=1024)
    """The model's context window in tokens (unset: litellm's figure for known models; for a local
    server, learned from its first "context exceeded" answer). Patch prompts are cut to fit it."""


class BudgetSettings(_Section):
    minutes: float | None = Field(None, gt=0.0, le=MAX_SECONDS / 60)
    """Wall-clock budget of a run in minutes (nothing new starts after it); unset: none."""
    usd: float | None = Field(None, gt=0.0)
    """Cost budget of a run in dollars, VMs and LLM together; unset: none."""
    max_experiments: int | None = Field(None, ge=1)
    """Candidate experiments per run at most; unset: no limit."""


class AutopilotSettings(_Section):
    enabled: bool = False
    """Run the whole loop (`run --autopilot`): research before the first wave and whenever fewer
    candidates are ready than workers, repair and port patches, stop on a plateau."""
    repairs: int = Field(2, ge=0, le=10)
    """Times a patch that does not apply, build or pass the checks goes back to the model."""
    patience: int = Field(3, ge=1, le=100)
    """Waves in a row without a keep before the autopilot stops (`plateau`)."""


class HypothesesSettings(_Section):
    require_approval: bool = False
    """When true, mined and generated hypotheses wait in `proposed` until approved."""
    skip_areas: list[str] = Field(default_factory=lambda: ["docs", "web", "server", "build", "ci"])
    """Fork commits touching only these areas are not mined (still browsable as fork commits).
    Areas: backend, core, model, app, server, web, python, tests, build, ci, docs, other."""
    skip_other_backends: bool = True
    """Fork commits with only other backends' files (CUDA-only for a CPU target) are not mined.
    Such a commit may also touch tests, docs or build files, but no core, model or app code; it stays
    browsable as a fork commit."""

    @field_validator("skip_areas")
    @classmethod
    def _known_areas(cls, value: list[str]) -> list[str]:
        from kb.vocabulary import AREAS

        unknown = [a for a in value if a not in AREAS]
        if unknown:
            raise ValueError(f"unknown area {unknown[0]!r} (areas: {', '.join(AREAS)})")
        return value


class InventoryRule(_Section):
    """How a project decides a fusion, for trees that are not ggml's (`[[kb.inventory.rules]]`).

    Give `call`, `pattern`, or both. Example for a tree whose backends call
    `demo_can_fuse(graph, i, (enum demo_op[]){OP_RMS_NORM, OP_MUL}, 2)`:
    `call = ["demo_can_fuse"]`, `op_prefix = "OP_"`.
    """

    call: list[str] = Field(default_factory=list)
    """Functions whose call decides a fusion. Their op list is read like ggml_can_fuse's (the first
    brace list or compound literal argument, else the third argument; named lists, helpers that wrap
    the call and lists built at run time are followed)."""
    op_prefix: str = "GGML_OP_"
    """Prefix of the op enum constants (`OP_` for `OP_RMS_NORM`); names are reported without it."""
    unary_prefix: str = ""
    """Prefix of unary-kind constants (`GGML_UNARY_OP_`), so `UNARY` can be reported as `UNARY:SILU`."""
    pattern: str = ""
    """A regex over the source (comments removed); its named group `ops` holds the fused op names."""
    backend_glob: str = ""
    """Only backends whose name matches this glob (empty: every backend)."""

    @field_validator("call", mode="before")
    @classmethod
    def _calls(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        import re

        if value:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"pattern {value!r} is not a valid regex ({exc})") from None
        return value


KNOWN_BACKENDS: tuple[str, ...] = (
    "cpu",
    "cuda",
    "hip",
    "musa",
    "metal",
    "vulkan",
    "sycl",
    "opencl",
    "kompute",
    "cann",
    "rpc",
    "blas",
    "webgpu",
    "hexagon",
    "zdnn",
    "amx",
    "mpi",
    "openvino",
    "zendnn",
)


class InventorySettings(_Section):
    """The backend fusion inventory (`autoresearch kb inventory`). Defaults read ggml trees."""

    target_backend: str = "cpu"
    """The backend being optimised: its gaps are listed first and mined into hypotheses."""
    backends_root: str = ""
    """Folder holding one folder per backend; empty means the ggml layout (`ggml/src/ggml-<name>/`)."""
    backend_dir_pattern: str = ""
    """Regex (full match) with a group `name` that picks backend folders under backends_root
    (empty: `ggml-(?P<name>...)` for ggml, else every folder, named as it is)."""
    backend_paths: dict[str, list[str]] = Field(default_factory=dict)
    """Backend -> files, folders (`dir/`) or globs, relative to the tree's top, for trees the built-in
    layout does not describe (`cpu = ["ggml/src/iqk/", "ggml/src/ggml.c"]`). Wins over the rest."""
    old_layout_cpu: list[str] = Field(
        default_factory=lambda: [
            *("ggml.c", "ggml-quants.c", "ggml-quants.h", "ggml-aarch64.c", "ggml-aarch64.h"),
            *("iqk/", "llamafile/", "iqk[-_]*", "sgemm.*"),
        ]
    )
    """The CPU backend's files, relative to the backends folder, in ggml trees with no `ggml-cpu`
    folder (llama.cpp before its 2024 reorganisation, ik_llama.cpp)."""
    known_backends: list[str] = Field(default_factory=lambda: list(KNOWN_BACKENDS))
    """Names that make a file `ggml-<name>.<ext>` in the backends folder a backend of its own (the
    old layout's `ggml-metal.m`, `ggml-vulkan.cpp`); a name with a `ggml-<name>/` folder always does."""
    rules: list[InventoryRule] = Field(default_factory=list)
    """How fusions are decided; empty means ggml's (ggml_can_fuse and relatives, GGML_OP_ ops)."""
    single_ops: list[str] = Field(default_factory=lambda: ["SOFT_MAX", "FLASH_ATTN_EXT", "GLU"])
    """Ops fused by construction (softmax with scale and mask, ...): listed per backend, never gaps."""
    view_ops: list[str] = Field(default_factory=lambda: ["NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"])
    """Ops that move no data, dropped from fusion keys so backends placing views differently compare."""
    reorder_functions: str = r"graph_optimi[sz]e|reorder"
    """Regex on function names: fusion checks inside them only reorder the graph and are ignored."""
    extensions: list[str] = Field(
        default_factory=lambda: [".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".m", ".mm"]
    )
    """Source files read in each backend folder."""

    @field_validator("backend_dir_pattern", "reorder_functions")
    @classmethod
    def _regex(cls, value: str) -> str:
        import re

        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a valid regex ({exc})") from None
        return value


class ForkSettings(_Section):
    """Reading forks (`autoresearch kb add-fork`), above all forks whose history was rewritten."""

    close_fraction: float = Field(0.2, ge=0.0, le=1.0)
    """A fork point found by content (no shared commit) is close when at most this fraction of the
    files under the paths of interest differ; farther, the fork is compared file by file."""
    max_files: int = Field(3000, ge=1)
    """File-level mode records at most this many differing files (the paths of interest first)."""


class KBSettings(_Section):
    inventory: InventorySettings = Field(default_factory=InventorySettings)
    """The backend fusion inventory (`kb inventory`)."""
    forks: ForkSettings = Field(default_factory=ForkSettings)
    """Reading forks (`kb add-fork`)."""
    fetch_timeout: float = Field(20.0, gt=0.0, le=3600.0)
    """Seconds one page may take, from connecting to the last byte (redirects included)."""
    max_page_bytes: int = Field(5_000_000, ge=1)
    """Largest page or file read; a bigger one is refused while it is read."""
    arxiv_base: str = "https://arxiv.org"
    """Where `kb add-paper` fetches arXiv HTML versions from (abs/pdf links are mapped to html)."""
    passage_chars: Annotated[int, Field(ge=200)] = 1200
    """Target passage length in characters (a passage never crosses a heading)."""
    max_commit_diff_bytes: Annotated[int, Field(ge=1000)] = 300_000
    """A fork commit's stored diff is cut at this size (the commit is kept and marked truncated)."""
    max_file_diff_bytes: Annotated[int, Field(ge=1000)] = 100_000
    """One file's part of a stored diff is cut at this size (huge generated files)."""


class ForkSuggestion(_Section):
    name: str
    """The fork's name in the knowledge base."""
    url: str
    """Its git remote."""
    branch: str = ""
    """The branch to follow (empty: the fork's default branch)."""
    fork_point: str = ""
    """The fork's commit where it left the target, when the target has no history to find it by
    (a commit of the fork; its descendants are the fork-only commits)."""


class ReadingSettings(_Section):
    """Sources worth reading for this target (recipes fill it; `kb add-fork` / `kb add-paper` use it)."""

    forks: list[ForkSuggestion] = Field(default_factory=list)
    """Forks worth fetching (`[[reading.forks]]` tables: name, url)."""
    papers: list[str] = Field(default_factory=list)
    """Paper URLs worth adding."""


class ValidationSettings(_Section):
    """`autoresearch validate`: the benchmark, the checks and the config tried on the baseline."""

    required: bool = False
    """`run` refuses to start without a passing `autoresearch validate` of the current scripts and config."""


class Settings(_Section):
    target: TargetSettings
    """The repository under test, its baseline, how to build it and its benchmark and checks scripts."""
    metric: MetricSettings = Field(default_factory=MetricSettings)
    """What decides: the primary metric, its direction, guards on the others."""
    policy: PolicySettings = Field(default_factory=PolicySettings)
    """The decision rule: minimum effect, error rate, pairs."""
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    """Workers: where experiments run and how many at once."""
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    """Seconds each step may take."""
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    """How each build, benchmark and checks step is isolated (README: Threat model)."""
    llm: LLMSettings = Field(default_factory=LLMSettings)
    """The model (through litellm); empty: miners only."""
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    """Run budgets (also `autoresearch run --budget-*`)."""
    autopilot: AutopilotSettings = Field(default_factory=AutopilotSettings)
    """The autonomous loop (`autoresearch run --autopilot`)."""
    hypotheses: HypothesesSettings = Field(default_factory=HypothesesSettings)
    """The hypothesis queue."""
    kb: KBSettings = Field(default_factory=KBSettings)
    """The knowledge base: papers, forks, the backend inventory."""
    reading: ReadingSettings = Field(default_factory=ReadingSettings)
    """Sources suggested for this target."""
    validation: ValidationSettings = Field(default_factory=ValidationSettings)
    """`autoresearch validate` and the check `run` makes before it starts."""

    @model_validator(mode="after")
    def _local_user(self) -> Settings:
        """On a local fleet the steps' user is one of this machine's: it must exist, and not be
        root under another name (a remote worker's harness checks its own, sandbox.user there)."""
        if self.fleet.backend != "local" or self.sandbox.mode == "off" or self.sandbox.method == "userns":
            return self
        import pwd

        try:
            uid = pwd.getpwnam(self.sandbox.user).pw_uid
        except KeyError:
            raise ValueError(f"sandbox.user {self.sandbox.user!r}: no such user on this machine") from None
        if uid == 0:
            raise ValueError(f"sandbox.user {self.sandbox.user!r}: uid 0 is root; name an unprivileged user")
        return self


def _explain(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    given = first.get("input")
    got = ""
    if isinstance(given, bool | int | float) or (isinstance(given, str) and len(given) <= 60):
        got = f" (got {_toml_value(given)})"  # `true` vs 1, "2" vs 2: the type is the point
    # A validator's own words come without pydantic's "Value error, " in front of them.
    message = str(first["msg"]).removeprefix("Value error, ")
    if not first["loc"] and first["type"] == "value_error":
        return message  # a rule across sections: its message names the keys
    return f"{where}: {message}{got}"


def parse_settings(data: dict[str, Any], origin: str) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_explain(exc)}") from None


def load_settings(path: Path) -> Settings:
    """Read and validate a config file; every failure is one ConfigError line naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed TOML (arrays or tables nested too deeply)") from None
    return parse_settings(data, str(path))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _comment(description: str | None) -> str | None:
    """The first sentence of a field's docstring, as one comment line."""
    if not description:
        return None
    text = " ".join(description.split())
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.(\s|$)", text)
    return text[: end.start() + 1] if end else text


def _wrap(text: str) -> list[str]:
    import textwrap

    return [line for part in text.splitlines() for line in textwrap.wrap(part, 98)]


def _fields(model: type[BaseModel] | None) -> dict[str, Any]:
    return dict(model.model_fields) if model is not None else {}


def _submodel(model: type[BaseModel] | None, key: str) -> type[BaseModel] | None:
    """The section model of `key` in `model` (a nested table, or the rows of an array of tables)."""
    info = _fields(model).get(key)
    if info is None:
        return None
    annotation = info.annotation
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _dump_table(
    prefix: str,
    data: dict[str, Any],
    out: list[str],
    model: type[BaseModel] | None,
    notes: Mapping[str, str],
    header: str | None = None,
) -> None:
    fields = _fields(model)

    def comments(dotted: str, key: str | None) -> list[str]:
        found = [_comment(fields[key].description)] if key is not None and key in fields else []
        found += [notes[dotted]] if dotted in notes else []
        return [f"# {line}" for text in found if text for line in _wrap(text)]

    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    arrays_of_tables = {
        k: v for k, v in scalars.items() if isinstance(v, list) and v and isinstance(v[0], dict)
    }
    unset = [k for k, v in data.items() if v is None]
    if scalars.keys() - arrays_of_tables.keys() or not tables or unset:
        out.extend(f"# {line}" for line in _wrap(header or ""))
        out.extend(f"# {line}" for line in _wrap(notes.get(prefix, "")))
        out.append(f"[{prefix}]")
        for key, value in scalars.items():
            if key not in arrays_of_tables:
                out.extend(comments(f"{prefix}.{key}", key))
                out.append(f"{key} = {_toml_value(value)}")
        for key in unset:  # shown commented out, so the key can be found and set
            out.extend(comments(f"{prefix}.{key}", key))
            out.append(f"# {key} = (unset)")
        out.append("")
    for key, rows in arrays_of_tables.items():
        row_model = _submodel(model, key)
        for row in rows:
            out.extend(comments(f"{prefix}.{key}", key))
            out.append(f"[[{prefix}.{key}]]")
            row_fields = _fields(row_model)
            for k, v in row.items():
                if v is None:
                    continue
                text = _comment(row_fields[k].description) if k in row_fields else None
                out.extend(f"# {line}" for line in _wrap(text or ""))
                out.append(f"{k} = {_toml_value(v)}")
            out.append("")
    for key, value in tables.items():
        sub = _submodel(model, key)
        text = _comment(fields[key].description) if key in fields else None
        _dump_table(f"{prefix}.{key}", value, out, sub, notes, text)


def dump_settings(settings: Settings, notes: Mapping[str, str] | None = None) -> str:
    """Render settings as TOML, every section written out so users see what they can change, each
    key under a one-line comment from its docstring. `notes` adds comments by dotted key
    (`fleet.parallel`) or table (`kb.inventory`): why init chose a value for this target."""
    out = [
        "# autoresearch workspace configuration: every key, its default and what it does is in",
        "# README.md, section Configuration. After changing the scripts or the build, run",
        "# `autoresearch validate` again.",
        "",
    ]
    for section, value in settings.model_dump(mode="json").items():
        text = _comment(Settings.model_fields[section].description)
        _dump_table(section, value, out, _submodel(Settings, section), notes or {}, text)
    return "\n".join(out).rstrip() + "\n"
