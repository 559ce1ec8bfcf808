#!/usr/bin/env bash
# timed.sh NAME COMMAND...: run COMMAND, then say how long it took (`time: NAME 12.3 s`, on stderr),
# exiting with its status. The line is also appended to $CHECK_TIMES when that is set: .ci/run
# prints those lines as one table at the end, so a slow CI run can be broken down.
set -uo pipefail
name=$1
shift
t0=$(date +%s%N)
"$@"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
line=$(printf 'time: %-10s %6d.%d s%s' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$([ $rc = 0 ] || echo " (exit $rc)")")
echo "$line" >&2
if [ -n "${CHECK_TIMES:-}" ]; then echo "$line" >>"$CHECK_TIMES"; fi
exit $rc
