"""What the harness costs per step: the sandbox, the escaping of the output, the hash checks.

Everything is real: a prepared experiment workdir of the runner's C test target (git worktrees, the
harness folder the runner writes), the packaged harness sourced by a bash run script as the
template does, and the sandbox helper compiled on this machine. For each isolation (none, and
uid+pid+mount / userns+pid+mount where the machine allows them) it times, per step:

- `ar_step` of a step that does nothing (`true`): the whole per-step cost (sandbox, escaping filter,
  both trees verified), against `bash -c true` run the way the old template ran a step;
- the sandbox helper alone (`ar-sandbox PLAN -- true` minus `true`);
- the verification alone (`ar_check`: one sha256sum over both trees' protected paths).

Medians of --reps steps each. A benchmark invocation is one step, so its wall time grows by the
first figure; a build or the checks are one step each.

    .venv/bin/python benchmarks/bench_sandbox.py [--reps N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb import gitrepo  # noqa: E402
from runner.harness.patchpaths import protected_paths  # noqa: E402
from runner.harness.prepare import prepare_workdir, resolve_scripts  # noqa: E402
from runner.harness.sandbox import sandbox_envs  # noqa: E402
from tests.runner.runner_target import make_workspace  # noqa: E402

SCRIPT = r"""
mark() { echo "@@AR $AUTORESEARCH_NONCE $EPOCHREALTIME $*"; }
finish() { echo "finish $*" >&2; exit 1; }
source .autoresearch-harness/harness.sh
ar_start > /dev/null
us() { # microseconds one command takes
  local t0=$EPOCHREALTIME t1
  "$@" > /dev/null 2>&1
  t1=$EPOCHREALTIME
  echo $((${t1/./} - ${t0/./}))
}
plain() { (cd "$(ar_tree A)" && env -u AUTORESEARCH_NONCE bash -c true) < /dev/null; }
jail() { "$AR_JAIL" "$AR_STATE/plan-A" -- /bin/true; }
echo "mode $AR_MODE"
for ((i = 0; i < REPS; i++)); do
  echo "step $(us ar_step bench-0-A A bash -c true)"
  echo "plain $(us plain)"
  echo "check $(us ar_check bench-0-A A)"
  echo "true $(us /bin/true)"
  if [ "$AR_MODE" != none ]; then echo "jail $(us jail)"; fi
done
"""


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def measure(root: Path, reps: int, sandbox: dict[str, str]) -> dict[str, Any]:
    ws, _ = make_workspace(root, sandbox=sandbox)
    repo = gitrepo.open_repo(ws.mirror_path)
    baseline = ws.settings.target.baseline_commit
    workdir = ws.worktrees_dir / "run1" / "exp1"
    scripts = resolve_scripts(ws, ws.settings)
    prepare_workdir(repo, workdir, baseline, baseline, scripts, protected_paths(ws, ws.settings))
    env = {
        **os.environ,
        **sandbox_envs(ws),
        "A_DIR": "a",
        "B_DIR": "b",
        "BATCH": "0",
        "AUTORESEARCH_NONCE": "0123456789abcdef",
        "REPS": str(reps),
    }
    out = subprocess.run(["bash", "-c", SCRIPT], cwd=workdir, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the harness failed: {out.stderr.strip()}")
    times: dict[str, list[float]] = {}
    mode = "?"
    for line in out.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "mode":
            mode = value
        elif value.isdigit():
            times.setdefault(key, []).append(int(value) / 1000)
    result: dict[str, Any] = {"isolation": mode, "reps": reps}
    result["step_ms"] = round(median(times["step"]), 2)
    result["old_step_ms"] = round(median(times["plain"]), 2)
    result["added_per_step_ms"] = round(result["step_ms"] - result["old_step_ms"], 2)
    result["check_ms"] = round(median(times["check"]), 2)
    if "jail" in times:
        result["sandbox_ms"] = round(median(times["jail"]) - median(times["true"]), 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configs = [("none", {"mode": "off"}), ("auto", {"mode": "auto"})]
    if os.geteuid() == 0:
        configs.append(("userns", {"mode": "auto", "method": "userns"}))
    results = []
    for _, sandbox in configs:
        with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
            results.append(measure(Path(tmp), args.reps, sandbox))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{os.cpu_count()} cores; medians of {args.reps} steps each")
    for r in results:
        extra = f", sandbox helper {r['sandbox_ms']} ms" if "sandbox_ms" in r else ""
        print(
            f"  {r['isolation']:17} step {r['step_ms']} ms (old template's step {r['old_step_ms']} ms: "
            f"+{r['added_per_step_ms']} ms), hash check {r['check_ms']} ms{extra}"
        )


if __name__ == "__main__":
    main()
