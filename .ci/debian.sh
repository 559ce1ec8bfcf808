#!/usr/bin/env bash
# The Debian packages the test suites need beyond Python's, installed when missing (CI runs as
# root on a machine that may be new): perf (`perf record -e cpu-clock`), qemu-user and an aarch64
# cross compiler with its C library (the cross-architecture checks). A failed apt-get fails CI
# with one line naming the packages and apt's last words.
set -euo pipefail

# package, and the command (or file) that shows it is there
wanted=(
  "linux-perf perf"
  "qemu-user qemu-aarch64"
  "gcc-aarch64-linux-gnu aarch64-linux-gnu-gcc"
  "libc6-dev-arm64-cross /usr/aarch64-linux-gnu/include/stdio.h"
)
missing=()
for entry in "${wanted[@]}"; do
  read -r package probe <<<"$entry"
  if [[ $probe == /* ]]; then [ -e "$probe" ] && continue; else command -v "$probe" >/dev/null && continue; fi
  missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "ci: Debian packages present (${wanted[*]%% *})"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ci: Debian packages missing and not root to install them: ${missing[*]}" >&2
  exit 1
fi
log=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "ci: apt-get install ${missing[*]} failed: $(grep -v '^\s*$' "$log" | tail -n 1)" >&2
  exit 1
fi
rm -f "$log"
echo "ci: installed ${missing[*]}"
