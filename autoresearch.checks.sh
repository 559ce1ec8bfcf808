#!/usr/bin/env bash
# Reference correctness checks for the llama.cpp target; exits non-zero on any regression.
#
# 1. test-backend-ops in test mode on the CPU backend (-b CPU): every op family a CPU patch may touch
#    is computed by the CPU backend and compared with the same backend in reference mode
#    (ggml_backend_cpu_set_use_ref): no graph fusion, no tiled matmul, no tiled or split-KV flash
#    attention. A patch is only compared with something else where it keeps the old code as the
#    use_ref path; otherwise both sides run the patched code and only shapes, NaNs and crashes are
#    checked (the reference patches keep the old code under use_ref for that reason).
#    -o entries come from ggml_op_desc: unary and GLU ops go by their own names (GELU, SWIGLU), fused
#    test cases by theirs (RMS_NORM_MUL_ADD); a plain name matches exactly, anything else is a regex.
#    A filter that selects no test fails the checks (a typo must not pass silently).
# 2. FLASH_ATTN_EXT on its own, restricted by a parameter regex: its full matrix is ~5300 cases
#    (about 15 minutes on 2 cores). The default keeps the generation shape (nb=1: one-chunk and
#    split-KV paths) and the prompt shape (nb=75: the tiled path, a full and a partial Q tile) with
#    F16 and F32 K/V, masks, ALiBi, sinks and softcap.
# 3. A short deterministic (greedy) generation with llama-simple, compared with a golden output.
#    The golden is recorded on first use (the runner's A/A self-test runs the baseline first).
#
# Environment overrides:
#   AR_CHECK_OPS   comma-separated -o filter (default below; FLASH_ATTN_EXT is run by AR_CHECK_FA)
#   AR_CHECK_FA    -p regex for the FLASH_ATTN_EXT run; 'all' runs every case, 'off' skips it
#   AR_MODEL       GGUF model (default: $AUTORESEARCH_GGUF, else models/model.gguf)
#   AR_GOLDEN      golden generation file (default: $AUTORESEARCH_GOLDEN, else .autoresearch-golden.txt)
#   AR_GEN_TOKENS  tokens to generate (default 24)
#   AR_BIN         folder of the built binaries (default build/bin)
set -euo pipefail

ops=${AR_CHECK_OPS:-SOFT_MAX.*,.*NORM.*,SCALE,ADD,MUL,ROPE.*,GET_ROWS,CPY,GELU.*,GEGLU.*,SILU,SWIGLU.*,MUL_MAT}
fa=${AR_CHECK_FA:-nb=(1|75),.*type_K=f(16|32),}
bin=${AR_BIN:-build/bin}
model=${AR_MODEL:-${AUTORESEARCH_GGUF:-models/model.gguf}}
golden=${AR_GOLDEN:-${AUTORESEARCH_GOLDEN:-.autoresearch-golden.txt}}
tokens=${AR_GEN_TOKENS:-24}

for exe in test-backend-ops llama-simple; do
  [ -x "$bin/$exe" ] || { echo "checks: $bin/$exe not built" >&2; exit 2; }
done
[ -f "$model" ] || { echo "checks: model not found at $model" >&2; exit 2; }

# run_ops LABEL ARGS...: test-backend-ops test -b CPU ARGS; fails on any failure or on zero tests
run_ops() {
  local label=$1 out rc=0 counts
  shift
  echo "checks: test-backend-ops test -b CPU $*"
  out=$("$bin/test-backend-ops" test -b CPU "$@" 2>&1) || rc=$?
  counts=$(grep -Eo '[0-9]+/[0-9]+ tests passed' <<<"$out" | tail -1 || true)
  if [ "$rc" -ne 0 ]; then
    grep -E "FAIL|failed|error|Error" <<<"$out" | head -40 >&2 || true
    echo "checks: test-backend-ops ($label) reported failures (exit $rc${counts:+, $counts})" >&2
    exit 1
  fi
  if [ -z "$counts" ] || [ "${counts%%/*}" = 0 ] || [ "${counts%% *}" != "${counts%%/*}/${counts%%/*}" ]; then
    echo "checks: test-backend-ops ($label) selected no test or did not report its count (${counts:-no count})" >&2
    exit 1
  fi
  echo "checks: $label: $counts"
}

run_ops ops -o "$ops"
case "$fa" in
  off) ;;
  all) run_ops FLASH_ATTN_EXT -o FLASH_ATTN_EXT ;;
  *) run_ops FLASH_ATTN_EXT -o FLASH_ATTN_EXT -p "$fa" ;;
esac

rc=0
text=$("$bin/llama-simple" -m "$model" -n "$tokens" "The capital of France is" 2>/dev/null) || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "checks: llama-simple failed (exit $rc$([ "$rc" -gt 128 ] && echo ", signal $((rc - 128))"))" >&2
  exit 1
fi
if [ -z "$text" ]; then
  echo "checks: llama-simple generated nothing" >&2
  exit 1
fi
if [ ! -f "$golden" ]; then
  printf '%s' "$text" > "$golden"
  echo "checks: recorded golden generation in $golden"
elif [ "$text" != "$(cat "$golden")" ]; then
  echo "checks: generation changed" >&2
  echo "  expected: $(cat "$golden")" >&2
  echo "  got:      $text" >&2
  exit 1
fi
echo "checks: ok"
