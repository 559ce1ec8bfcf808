"""Typed settings: `autoresearch.toml` in a workspace, validated with pydantic.

Every field has a default except the target; errors name the file, the key and the reason in one line.
Secrets (API keys) are never stored here: litellm reads them from the environment.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kb.errors import ConfigError
from kb.locate import CONFIG_NAME as CONFIG_NAME  # re-exported: callers know it from here


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class GuardSettings(_Section):
    metric: str
    max_regression: float = 0.02
    """Largest tolerated relative loss of this secondary metric (0.02 = 2%)."""


class MetricSettings(_Section):
    primary: str = "throughput"
    direction: Literal["higher", "lower"] = "higher"
    unit: str = ""
    guards: list[GuardSettings] = Field(default_factory=list)
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
    min_effect: float = Field(0.01, ge=0.0, lt=1.0)
    alpha: float = Field(0.05, gt=0.0, lt=0.5)
    max_pairs: int = Field(80, ge=2)
    min_pairs: int = Field(8, ge=2)
    batch_pairs: int = Field(8, ge=1)
    """Pairs per job: one job on a worker runs a batch of pairs; more pairs is another job."""
    self_test_pairs: int = Field(8, ge=2)


class SkyPilotSettings(_Section):
    infra: str = ""
    """SkyPilot infra, e.g. `aws`, `gcp/us-central1`, `kubernetes`, `slurm/<cluster>/<partition>`."""
    cpus: str = "4+"
    memory: str = ""
    accelerators: str = ""
    max_clusters: int = Field(2, ge=1)
    """Clusters of one run at once (the run's `parallel` is capped by it)."""
    price_per_hour: float | None = Field(None, ge=0.0)
    """Per-hour price override for infra that reports none (Slurm, Kubernetes)."""
    noise_limit: float = Field(0.10, gt=0.0)
    """A new worker whose A/A noise (per-sample CV) exceeds this is replaced."""
    qualify_pairs: int = Field(6, ge=3)
    """A/A pairs a new cluster runs (its first job, right after setup) before it takes experiments."""
    stagger_seconds: float = Field(20.0, ge=0.0)
    """Seconds between two cluster launches (clusters sharing a node race for SkyPilot's ports)."""
    idle_minutes: float = Field(5.0, ge=0.0)
    """A qualified cluster idle this long while nothing of its run is queued is downed."""
    max_failures: int = Field(3, ge=1)
    """Launch or qualification failures in a row (no capacity, failed setup, too noisy) before the
    run stops launching and is interrupted with the last reason."""


class FleetSettings(_Section):
    backend: Literal["local", "skypilot"] = "local"
    parallel: int = Field(2, ge=1)
    wave_size: int = Field(0, ge=0)
    """Experiments per wave (0: as many as `parallel`). Every wave re-measures the current baseline."""
    template: str = ""
    """Experiment task template (a SkyPilot task YAML); empty: the packaged runner/experiment.yaml.
    A relative path is read from the workspace. Patches may never touch it."""
    skypilot: SkyPilotSettings = Field(default_factory=SkyPilotSettings)


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
    shared: list[str] = Field(default_factory=list)
    """Folders every build shares (caches): writable in the baseline's steps, read-only in the
    candidate's (ccache's folder is added when ccache is installed)."""
    expose: list[str] = Field(default_factory=list)
    """Folders or files the steps may read although they are hidden (under HOME or the workspace):
    a toolchain in ~/.local, say. Paths named by `target.env` are exposed read-only by themselves."""


class TimeoutSettings(_Section):
    build: int = Field(900, ge=1)
    bench: int = Field(300, ge=1)
    check: int = Field(300, ge=1)


class LLMSettings(_Section):
    model: str = ""
    """Any litellm model string; empty means no LLM (miners only)."""
    api_base: str = ""
    budget_usd: float = Field(5.0, ge=0.0)
    timeout: float = Field(120.0, gt=0.0)
    max_retries: int = Field(3, ge=0)
    temperature: float = 0.2
    max_tokens: int | None = Field(None, ge=1)
    """Cap on one answer's tokens (unset: the provider's default). An answer cut off at the cap is
    invalid and asked again, then the call fails."""
    structured_output: Literal["json_schema", "prompt"] = "json_schema"
    """json_schema: also send the answer's schema as `response_format`, so servers that support it
    (OpenAI, llama-server, vLLM) constrain decoding to it; litellm drops it for providers that do not.
    prompt: only describe the schema in the system message."""


class BudgetSettings(_Section):
    minutes: float | None = None
    usd: float | None = None
    max_experiments: int | None = None


class HypothesesSettings(_Section):
    require_approval: bool = False
    """When true, mined and generated hypotheses wait in `proposed` until approved."""


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


class InventorySettings(_Section):
    """The backend fusion inventory (`autoresearch kb inventory`). Defaults read ggml trees."""

    target_backend: str = "cpu"
    """The backend being optimised: its gaps are listed first and mined into hypotheses."""
    backends_root: str = ""
    """Folder holding one folder per backend; empty means the ggml layout (`ggml/src/ggml-<name>/`)."""
    backend_dir_pattern: str = ""
    """Regex (full match) with a group `name` that picks backend folders under backends_root
    (empty: `ggml-(?P<name>...)` for ggml, else every folder, named as it is)."""
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


class KBSettings(_Section):
    inventory: InventorySettings = Field(default_factory=InventorySettings)
    fetch_timeout: float = 20.0
    max_page_bytes: int = 5_000_000
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
    url: str


class ReadingSettings(_Section):
    """Sources worth reading for this target (recipes fill it; `kb add-fork` / `kb add-paper` use it)."""

    forks: list[ForkSuggestion] = Field(default_factory=list)
    papers: list[str] = Field(default_factory=list)


class Settings(_Section):
    target: TargetSettings
    metric: MetricSettings = Field(default_factory=MetricSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    hypotheses: HypothesesSettings = Field(default_factory=HypothesesSettings)
    kb: KBSettings = Field(default_factory=KBSettings)
    reading: ReadingSettings = Field(default_factory=ReadingSettings)


def _explain(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{where}: {first['msg']}"


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


def _dump_table(prefix: str, data: dict[str, Any], out: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    arrays_of_tables = {
        k: v for k, v in scalars.items() if isinstance(v, list) and v and isinstance(v[0], dict)
    }
    if scalars.keys() - arrays_of_tables.keys() or not tables:
        out.append(f"[{prefix}]")
        for key, value in scalars.items():
            if key not in arrays_of_tables:
                out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    for key, rows in arrays_of_tables.items():
        for row in rows:
            out.append(f"[[{prefix}.{key}]]")
            out.extend(f"{k} = {_toml_value(v)}" for k, v in row.items() if v is not None)
            out.append("")
    for key, value in tables.items():
        _dump_table(f"{prefix}.{key}", value, out)


def dump_settings(settings: Settings) -> str:
    """Render settings as TOML (every section written out so users see what they can change)."""
    out = ["# autoresearch workspace configuration. Reference: README.md, section Configuration.", ""]
    for section, value in settings.model_dump(mode="json").items():
        _dump_table(section, value, out)
    return "\n".join(out).rstrip() + "\n"
