#!/usr/bin/env bash
# Reference benchmark for the llama.cpp target: runs llama-bench with the published protocol
# (-p 512 -n 128 -t <cores> -r 5) and prints one `METRIC pp=<t/s>` / `METRIC tg=<t/s>` line per
# repetition, taken from llama-bench's JSON `samples_ts`.
#
# It builds nothing (the experiment template's BUILD_CMD builds). Rows are selected by
# (n_prompt, n_gen), never by position, and any missing field or unexpected row set fails loudly:
# the published run was misled by a script that reported 14 t/s where the truth was 52.
#
# Environment overrides:
#   AR_MODEL        GGUF model path (default: $AUTORESEARCH_GGUF, else models/model.gguf)
#   AR_PROMPT       prompt tokens for pp (default 512; 0 disables pp)
#   AR_GEN          generated tokens for tg (default 128; 0 disables tg)
#   AR_THREADS      threads (default: the machine's cores)
#   AR_REPS         repetitions (default 5)
#   AR_FA           flash attention, one setting per run: 0 or 1 (default 0)
#   LLAMA_BENCH     llama-bench binary (default build/bin/llama-bench)
#   AR_BENCH_JSON   parse this recorded llama-bench JSON instead of running llama-bench (tests)
#   AR_BOTTLENECK   1 (default) also prints bytes_per_iter (model bytes read per generated token)
#                   and mem_bw_gbs (measured copy bandwidth), so research can tell memory-bound
set -euo pipefail

prompt=${AR_PROMPT:-512}
gen=${AR_GEN:-128}
threads=${AR_THREADS:-$(nproc)}
reps=${AR_REPS:-5}
fa=${AR_FA:-0}
case "$fa" in 0|1) ;; *) echo "autoresearch.sh: AR_FA must be 0 or 1, got '$fa'" >&2; exit 2 ;; esac

if [ -n "${AR_BENCH_JSON:-}" ]; then
  json=$(cat "$AR_BENCH_JSON")
else
  model=${AR_MODEL:-${AUTORESEARCH_GGUF:-models/model.gguf}}
  bench=${LLAMA_BENCH:-build/bin/llama-bench}
  [ -x "$bench" ] || { echo "autoresearch.sh: llama-bench not found at $bench (build first)" >&2; exit 2; }
  [ -f "$model" ] || { echo "autoresearch.sh: model not found at $model" >&2; exit 2; }
  json=$("$bench" -m "$model" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" -fa "$fa" -o json)
fi

AR_PROMPT_N=$prompt AR_GEN_N=$gen AR_FA_WANT=$fa python3 -c '
import json, math, os, sys

def fail(msg):
    print(f"autoresearch.sh: {msg}", file=sys.stderr)
    sys.exit(3)

try:
    rows = json.loads(sys.stdin.read())
except json.JSONDecodeError as exc:
    fail(f"llama-bench output is not JSON ({exc})")
if not isinstance(rows, list) or not rows:
    fail("llama-bench JSON has no result rows")
prompt, gen, fa = int(os.environ["AR_PROMPT_N"]), int(os.environ["AR_GEN_N"]), int(os.environ["AR_FA_WANT"])
wanted = {}
if prompt > 0:
    wanted[(prompt, 0)] = "pp"
if gen > 0:
    wanted[(0, gen)] = "tg"
found = {}
for row in rows:
    for field in ("n_prompt", "n_gen", "samples_ts"):
        if field not in row:
            fail(f"result row lacks the field {field!r}")
    key = (int(row["n_prompt"]), int(row["n_gen"]))
    if key not in wanted:
        fail(f"unexpected result row n_prompt={key[0]} n_gen={key[1]} (expected {sorted(wanted)})")
    # an int in llama-bench JSON (-1 auto, 0 off, 1 on; a bool in older versions): auto is not 1
    got_fa = row.get("flash_attn", fa)
    if int(got_fa) != fa:
        fail(f"row {key} ran with flash_attn={got_fa}, expected {fa}")
    if key in found:
        fail(f"two result rows for n_prompt={key[0]} n_gen={key[1]}")
    found[key] = row
missing = [wanted[k] for k in wanted if k not in found]
if missing:
    fail(f"no result row for {missing}")
for key, name in wanted.items():
    samples = found[key]["samples_ts"]
    if not isinstance(samples, list) or not samples:
        fail(f"{name}: samples_ts is empty")
    for value in samples:
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            fail(f"{name}: bad sample {value!r}")
        print(f"METRIC {name}={value:.4f}")
' <<<"$json"

# What the bottleneck analysis needs: text generation reads every weight once per token, so the
# model's size is the bytes moved per token; the copy bandwidth is measured here, best of three.
if [ "${AR_BOTTLENECK:-1}" = "1" ] && [ -z "${AR_BENCH_JSON:-}" ]; then
  echo "METRIC bytes_per_iter=$(stat -c %s "$model")"
  python3 -c '
import time
src = bytearray(b"x" * (256 << 20))
dst = bytearray(len(src))
dst[:] = src  # touch every page first: page faults are not bandwidth
best = float("inf")
for _ in range(3):
    start = time.perf_counter()
    dst[:] = src
    best = min(best, time.perf_counter() - start)
print(f"METRIC mem_bw_gbs={2 * len(src) / best / 1e9:.2f}")
'
fi
