#!/usr/bin/env bash
# Reference correctness checks for the llama.cpp target; exits non-zero on any regression.
#
# 1. test-backend-ops in test mode on the CPU backend (-b CPU): every op family a CPU patch may touch
#    is computed by the optimised CPU path and compared with the CPU reference implementation
#    (ggml_backend_cpu_set_use_ref), fused paths included.
# 2. A short deterministic (greedy) generation with llama-simple, compared with a golden output.
#    The golden is recorded on first use (the runner's A/A self-test runs the baseline first).
#
# Environment overrides:
#   AR_CHECK_OPS   comma-separated op families (default below)
#   AR_MODEL       GGUF model (default: $AUTORESEARCH_GGUF, else models/model.gguf)
#   AR_GOLDEN      golden generation file (default: $AUTORESEARCH_GOLDEN, else .autoresearch-golden.txt)
#   AR_GEN_TOKENS  tokens to generate (default 24)
#   AR_BIN         folder of the built binaries (default build/bin)
set -euo pipefail

ops=${AR_CHECK_OPS:-SOFT_MAX,RMS_NORM,NORM,MUL,ADD,SCALE,FLASH_ATTN_EXT,MUL_MAT,GET_ROWS,CPY,GLU,ROPE,UNARY}
bin=${AR_BIN:-build/bin}
model=${AR_MODEL:-${AUTORESEARCH_GGUF:-models/model.gguf}}
golden=${AR_GOLDEN:-${AUTORESEARCH_GOLDEN:-.autoresearch-golden.txt}}
tokens=${AR_GEN_TOKENS:-24}

for exe in test-backend-ops llama-simple; do
  [ -x "$bin/$exe" ] || { echo "checks: $bin/$exe not built" >&2; exit 2; }
done

echo "checks: test-backend-ops -b CPU -o $ops"
if ! out=$("$bin/test-backend-ops" test -b CPU -o "$ops" 2>&1); then
  echo "$out" | grep -E "FAIL|failed|error" | head -40 >&2
  echo "checks: test-backend-ops reported failures" >&2
  exit 1
fi
echo "$out" | grep -E "tests passed|Backend .*: OK" | tail -3

[ -f "$model" ] || { echo "checks: model not found at $model" >&2; exit 2; }
text=$("$bin/llama-simple" -m "$model" -n "$tokens" "The capital of France is" 2>/dev/null)
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
