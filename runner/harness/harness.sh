# shellcheck shell=bash
# The autoresearch experiment harness, sourced by the run script of runner/harness/experiment.yaml.
#
# The runner writes this folder (.autoresearch-harness/ in the experiment's workdir, the run's own
# copy) next to the trees: this file, ar-sandbox.c, the benchmark and checks scripts (files/), the
# protected paths (protected.list: `kind TAB path`, kind s = a script of files/, f = a file,
# d = a folder) and what the baseline holds there (files.sha256, in sha256sum's format; dirs.list
# and listing, the sorted `find -printf '%y %p %l'` of the protected folders). It gives the run
# script two functions:
#
#   ar_start                 pick the sandbox (SANDBOX marker), verify both trees
#   ar_step NAME SIDE CMD..  run CMD in SIDE's tree (A or B) as one sandboxed step: its own PID and
#                            mount namespaces (every process it started dies with it), an
#                            unprivileged user, a private /tmp and HOME, the workspace, the other
#                            tree and this folder hidden, the protected paths read-only; what it
#                            prints goes through ar_escape into the log (no line of it can pass for
#                            a marker, and it never holds the log's descriptor); then both trees are
#                            verified, and any change to a protected path ends the job (TAMPERED).
#                            Without isolation both trees are verified before the step too (a
#                            candidate's leftover process may have changed them in between:
#                            TAMPERED after-<the previous step>). With AR_STEP_LIMIT set (the
#                            step's limit in seconds), the step is ended from outside 10 s past it.
#
# It uses the run script's `mark` and `finish`, and its envs: A_DIR, B_DIR, BATCH,
# AUTORESEARCH_SANDBOX (auto|off|required), AUTORESEARCH_SANDBOX_METHOD (auto|uid|userns),
# AUTORESEARCH_SANDBOX_USER, AUTORESEARCH_HIDE, AUTORESEARCH_EXPOSE, AUTORESEARCH_SHARED (lists
# separated by `:`), and optionally AUTORESEARCH_STEP_OUTPUT_MAX and AUTORESEARCH_STEP_NPROC. Everything is in functions, so that nothing a step writes later into this file
# can change what a running harness does.

AR_H=$PWD/.autoresearch-harness
AR_STATE=$PWD/.autoresearch
AR_MODE=none
AR_WHY=
AR_JAIL=
AR_UID=
AR_GID=
AR_CCACHE=
AR_SHARED=()
AR_WALK=()
AR_CHANGED=
AR_SCRUB=()
AR_LAST=

ar_tree() { if [ "$1" = A ]; then echo "$PWD/$A_DIR"; else echo "$PWD/$B_DIR"; fi; }

# A step's output as log lines: a line that starts like a marker is escaped (`@@AR!`), and every
# line ends with a newline, so the harness's next marker always starts a line of its own. What a
# step prints is bounded: lines are folded at 64 KiB (the runner reads them the same way,
# protocol.MAX_LINE_BYTES), and past AUTORESEARCH_STEP_OUTPUT_MAX bytes (64 MiB) the rest is read
# and dropped, so a step that floods its output fills neither the log's disk nor the runner.
AR_OUTPUT_MAX=${AUTORESEARCH_STEP_OUTPUT_MAX:-67108864}
# A step's output reaches the log line by line as it is printed (the console follows a build
# live): fold would write into its pipe in 4 KiB blocks, so it runs line-buffered where stdbuf is,
# and mawk reads its input in blocks unless interactive.
# mawk reads a record only up to a NUL byte when interactive, so NULs are shown as ^A (0x01) first:
# a step's line keeps its length (the 64 MiB cap counts it) and a marker behind a NUL stays behind it.
if command -v fold > /dev/null; then AR_FOLD=(fold -b -w 65536); else AR_FOLD=(cat); fi
AR_NUL=(cat)
AR_AWK=(awk)
if [ "${AR_FOLD[0]}" = fold ] && command -v stdbuf > /dev/null; then
  AR_FOLD=(stdbuf -oL "${AR_FOLD[@]}")
  if awk -W version 2> /dev/null | grep -q mawk; then
    AR_NUL=(stdbuf -oL tr '\000' '\001')
    AR_AWK=(awk -W interactive)
  fi
fi
# Under the uid method, the most processes (and threads) the steps' user may have at once: a fork
# bomb in a build stops there, before the machine runs out of process ids or memory.
AR_NPROC=${AUTORESEARCH_STEP_NPROC:-4096}
[[ $AR_NPROC =~ ^[1-9][0-9]*$ ]] || AR_NPROC=4096
ar_escape() {
  LC_ALL=C "${AR_NUL[@]}" | "${AR_FOLD[@]}" | LC_ALL=C "${AR_AWK[@]}" -v max="$AR_OUTPUT_MAX" '{
    n += length($0) + 1
    if (n > max) {
      if (!cut) { print "autoresearch: the step printed more than " max " bytes; the rest is not logged"; cut = 1; fflush() }
      next
    }
    if (index($0, "@@AR") == 1) $0 = "@@AR!" substr($0, 5)
    print; fflush()
  }'
}

ar_list() { # ar_list "a:b:c" -> one entry per line (~/ expanded), empty entries dropped
  local IFS=: entry
  for entry in $1; do
    [ -n "$entry" ] && printf '%s\n' "${entry/#\~\//$HOME/}"
  done
}

ar_plain() { # a path the plan can carry (no tab, no newline)
  case $1 in *$'\t'* | *$'\n'*) return 1 ;; esac
}

ar_build_jail() {
  local src=$AR_H/ar-sandbox.c sum cc
  sum=$(sha256sum < "$src") || { AR_WHY="cannot read $src"; return 1; }
  AR_JAIL=$AR_STATE/ar-sandbox-${sum:0:16}
  [ -x "$AR_JAIL" ] && return 0
  for cc in cc gcc clang; do
    command -v "$cc" > /dev/null || continue
    if "$cc" -O2 -o "$AR_JAIL.tmp" "$src" 2> "$AR_STATE/ar-sandbox.cc.log"; then
      mv -f "$AR_JAIL.tmp" "$AR_JAIL" && return 0
    fi
  done
  AR_WHY="no C compiler could build the sandbox helper ($(tail -n 1 "$AR_STATE/ar-sandbox.cc.log" 2> /dev/null))"
  return 1
}

ar_caches() { # shared caches: written by the baseline's steps, read-only for the candidate's
  local dir
  while IFS= read -r dir; do
    [ -d "$dir" ] && AR_SHARED+=("$dir")
  done < <(ar_list "${AUTORESEARCH_SHARED:-}")
  if command -v ccache > /dev/null; then
    dir=${CCACHE_DIR:-$(ccache -k cache_dir 2> /dev/null || ccache --get-config cache_dir 2> /dev/null)}
    if [ -n "$dir" ] && mkdir -p "$dir" 2> /dev/null; then
      AR_CCACHE=$dir
      AR_SHARED+=("$dir")
    fi
  fi
}

ar_hidden() { # the folders every step must not see: HOME, the workdir, AUTORESEARCH_HIDE
  printf '%s\n' "$HOME" "$PWD"
  ar_list "${AUTORESEARCH_HIDE:-}"
}

ar_covers() { # ar_covers PATH: would binding PATH into a step show a hidden folder again?
  local top=${1%/} hidden
  while IFS= read -r hidden; do
    case "$hidden/" in "$top"/*) return 0 ;; esac
  done < <(ar_hidden)
  return 1
}

ar_plan() { # ar_plan SIDE METHOD: the sandbox plan of SIDE's steps (see ar-sandbox.c)
  local side=$1 method=$2 tree entry kind path part acc rest mode inside
  local -A pinned=() sealed=()
  tree=$(ar_tree "$side")
  ar_plain "$tree" && ar_plain "$PWD" && ar_plain "$HOME" || return 1
  if [ "$method" = userns ]; then
    printf 'userns\n'
    # Root outside too: device nodes would stay writable to it, so only the harmless ones remain.
    [ "$(id -u)" = 0 ] && printf 'mindev\n'
  fi
  # As root the steps of every job are one user, whose processes RLIMIT_NPROC counts together.
  [ "$method" = uid ] && printf 'user\t%s\t%s\nnproc\t%s\n' "$AR_UID" "$AR_GID" "$AR_NPROC"
  printf 'tmpfs\t/tmp\t1777\ntmpfs\t/var/tmp\t1777\n'
  { [ "$method" = userns ] && [ "$(id -u)" = 0 ]; } || printf 'tmpfs\t/dev/shm\t1777\n'
  while IFS= read -r entry; do
    [ -n "$entry" ] && [ "$entry" != / ] && ar_plain "$entry" && printf 'tmpfs\t%s\t0755\n' "$entry"
  done < <(ar_hidden)
  printf 'bind\t%s\t%s\trw\n' "$tree" "$tree"
  for entry in "${AR_SHARED[@]}"; do
    ar_plain "$entry" && ! ar_covers "$entry" || continue
    mode=ro
    [ "$side" = A ] && mode=rw
    printf 'bind\t%s\t%s\t%s\n' "$entry" "$entry" "$mode"
  done
  while IFS= read -r entry; do
    [ -e "$entry" ] && ar_plain "$entry" && ! ar_covers "$entry" && printf 'bind\t%s\t%s\tro\n' "$entry" "$entry"
  done < <(ar_list "${AUTORESEARCH_EXPOSE:-}")
  # Every folder on the way to a protected path becomes a mount point (it cannot be renamed away
  # and replaced during a step), then each protected path is bound read-only: the scripts from
  # this folder's copies, the others onto themselves.
  while IFS=$'\t' read -r kind path; do
    [ -n "$path" ] && ar_plain "$path" || continue
    acc=
    rest=$path
    inside=
    while [[ $rest == */* ]]; do
      part=${rest%%/*}
      rest=${rest#*/}
      acc=${acc:+$acc/}$part
      if [ -n "${sealed[$acc]:-}" ]; then # inside a protected folder: read-only already
        inside=1
        break
      fi
      if [ -z "${pinned[$acc]:-}" ] && [ -d "$tree/$acc" ] && [ ! -L "$tree/$acc" ]; then
        pinned[$acc]=1
        printf 'bind\t%s\t%s\trw\n' "$tree/$acc" "$tree/$acc"
      fi
    done
    [ -z "$inside" ] || continue
    case $kind in
      s) printf 'bind\t%s\t%s\tro\n' "$AR_H/files/$path" "$tree/$path" ;;
      f | d)
        if [ -e "$tree/$path" ] && [ ! -L "$tree/$path" ]; then
          printf 'bind\t%s\t%s\tro\n' "$tree/$path" "$tree/$path"
          [ "$kind" = d ] && sealed[$path]=1
        fi
        ;;
    esac
  done < "$AR_H/protected.list"
  printf 'home\t/tmp/home\nchdir\t%s\n' "$tree"
}

ar_try() { # ar_try METHOD: plans for both sides and a trial step; 0 when it works here
  local method=$1 side err user=${AUTORESEARCH_SANDBOX_USER:-nobody}
  if [ "$method" = uid ]; then
    [ "$(id -u)" = 0 ] || { AR_WHY="uid: the harness is not root"; return 1; }
    AR_UID=$(id -u "$user" 2> /dev/null) && AR_GID=$(id -g "$user" 2> /dev/null) \
      || { AR_WHY="uid: no user $user"; return 1; }
    [ "$AR_UID" != 0 ] || { AR_WHY="uid: $user is root (sandbox.user must be unprivileged)"; return 1; }
  fi
  for side in A B; do
    ar_plan "$side" "$method" > "$AR_STATE/plan-$side" \
      || { AR_WHY="$method: a path holds a tab or a newline"; return 1; }
  done
  if [ "$method" = uid ]; then
    # The trees become the steps' user's, and that user may run other processes here, outside any
    # step (a daemon of its own, a job a scheduler runs for it): the folder that holds the trees is
    # for the harness alone. A step sees its tree where it is, in a view of its own.
    chmod 700 "$PWD" || { AR_WHY="uid: cannot close $PWD to other users"; return 1; }
    for side in A B; do # the step's user owns its tree (once per experiment and worker)
      if [ ! -f "$AR_STATE/owned-$side" ]; then
        chown -R "$AR_UID:$AR_GID" "$(ar_tree "$side")" && touch "$AR_STATE/owned-$side" \
          || { AR_WHY="uid: cannot give the trees to $user"; return 1; }
      fi
    done
    for side in "${AR_SHARED[@]}"; do
      if [ -n "$(find "$side" ! -user "$AR_UID" -print -quit 2> /dev/null)" ]; then
        chown -R "$AR_UID:$AR_GID" "$side" 2> /dev/null || true
      fi
    done
  fi
  for side in A B; do
    err=$(env -u AUTORESEARCH_NONCE "$AR_JAIL" "$AR_STATE/plan-$side" -- /bin/sh -c 'test -w .' 2>&1 < /dev/null) || {
      AR_WHY="$method: ${err:-the trial step failed}"
      AR_WHY=${AR_WHY//$'\n'/ }
      return 1
    }
  done
}

ar_detect() {
  local want=${AUTORESEARCH_SANDBOX:-auto} method=${AUTORESEARCH_SANDBOX_METHOD:-auto} m methods why=
  AR_MODE=none
  if [ "$want" = off ]; then
    AR_WHY="sandbox.mode = off"
    return 0
  fi
  ar_build_jail || return 0
  ar_caches
  case $method in
    auto) if [ "$(id -u)" = 0 ]; then methods="uid userns"; else methods=userns; fi ;;
    *) methods=$method ;;
  esac
  for m in $methods; do
    if ar_try "$m"; then
      AR_MODE=$m+pid+mount
      AR_WHY=
      return 0
    fi
    why="${why:+$why; }$AR_WHY"
  done
  AR_WHY=$why
}

# ar_expect: what both trees must hold at their protected paths, with absolute paths, so that one
# sha256sum (and, when folders are protected, one find) checks both trees after each step.
ar_expect() {
  local t tree line
  local -a dirs
  : > "$AR_STATE/expect.sha256"
  : > "$AR_STATE/expect.listing"
  AR_WALK=()
  [ -s "$AR_H/dirs.list" ] && mapfile -t dirs < "$AR_H/dirs.list"
  for t in A B; do
    tree=$(ar_tree "$t")
    case $tree in *\\*) return 1 ;; esac # sha256sum would need its escaping for these names
    while IFS= read -r line; do
      if [ "${line:0:1}" = '\' ]; then
        printf '%s  %s/%s\n' "${line%%  *}" "$tree" "${line#*  }"
      else
        printf '%s  %s/%s\n' "${line:0:64}" "$tree" "${line:66}"
      fi
    done < "$AR_H/files.sha256" >> "$AR_STATE/expect.sha256"
    while IFS= read -r line; do
      printf '%s %s/%s\n' "${line:0:1}" "$tree" "${line:2}"
    done < "$AR_H/listing" >> "$AR_STATE/expect.listing"
    for line in "${dirs[@]}"; do AR_WALK+=("$tree/$line"); done
  done
  LC_ALL=C sort -o "$AR_STATE/expect.listing" "$AR_STATE/expect.listing"
}

# ar_verify: 0 when every protected path of both trees is as the baseline has it; else sets
# AR_CHANGED to the first one that differs (an absolute path) and returns 1. No subshell: it runs
# after every step.
ar_verify() {
  local line
  AR_CHANGED=
  if [ -s "$AR_STATE/expect.sha256" ] \
    && ! LC_ALL=C sha256sum --quiet --strict -c "$AR_STATE/expect.sha256" > "$AR_STATE/verify.out" 2> /dev/null; then
    IFS= read -r line < "$AR_STATE/verify.out"
    AR_CHANGED=${line%: FAILED*}
    return 1
  fi
  if [ "${#AR_WALK[@]}" -gt 0 ]; then
    find "${AR_WALK[@]}" -printf '%y %p %l\n' 2> /dev/null | LC_ALL=C sort > "$AR_STATE/listing.now"
    if ! cmp -s "$AR_STATE/listing.now" "$AR_STATE/expect.listing"; then
      LC_ALL=C comm -3 "$AR_STATE/expect.listing" "$AR_STATE/listing.now" > "$AR_STATE/verify.out"
      IFS= read -r line < "$AR_STATE/verify.out"
      line=${line#$'\t'}
      line=${line#? }
      AR_CHANGED=${line% *}
      return 1
    fi
  fi
}

ar_snapshot() { # every entry of the baseline tree with its inode, change time and size
  (cd "$(ar_tree A)" && find . -mindepth 1 -printf '%i %C@ %s %p\n' 2> /dev/null | LC_ALL=C sort)
}

# ar_check STEP SIDE: verify both trees after STEP (a step of SIDE, or empty before the first);
# without a sandbox, also that nothing in the baseline tree changed since its last step (only the
# candidate's processes could have changed it: with a sandbox they cannot even see it).
ar_check() {
  local step=$1 side=$2 t path
  if ! ar_verify; then
    path=$AR_CHANGED
    t=B
    [ "${path#"$(ar_tree A)"/}" != "$path" ] && t=A
    path=${path#"$(ar_tree "$t")"/}
    mark TAMPERED "$step" "$t" "$path"
    echo "tampered: $path in tree $t changed during $step"
    return 1
  fi
  [ "$AR_MODE" = none ] || return 0
  if [ "$side" = A ] || [ ! -f "$AR_STATE/a-snapshot" ]; then
    ar_snapshot > "$AR_STATE/a-snapshot"
  elif ! ar_snapshot | cmp -s - "$AR_STATE/a-snapshot"; then
    path=$(ar_snapshot | LC_ALL=C comm -3 - "$AR_STATE/a-snapshot" | head -n 1)
    path=${path#$'\t'}
    path=${path#* * * ./}
    mark TAMPERED "$step" A "$path"
    echo "tampered: $path in tree A changed during $step"
    return 1
  fi
}

ar_secrets() { # `env -u` options for the runner's secrets: no step needs an API key or a token
  local name
  AR_SCRUB=()
  while IFS= read -r name; do
    case $name in
      *_API_KEY | *_TOKEN | *_SECRET | *_SECRET_* | *_PASSWORD) AR_SCRUB+=(-u "$name") ;;
    esac
  done < <(compgen -e)
}

ar_start() {
  mkdir -p "$AR_STATE" || finish failed setup
  ar_secrets
  ar_detect
  mark SANDBOX "$AR_MODE" "$AR_WHY"
  if [ "$AR_MODE" = none ]; then
    echo "warning: the steps run without isolation ($AR_WHY)"
    if [ "${AUTORESEARCH_SANDBOX:-auto}" = required ]; then
      echo "sandbox.mode = required: not running without isolation"
      finish failed sandbox
    fi
  else
    echo "sandbox: $AR_MODE"
  fi
  ar_expect || finish failed setup
  ar_check "before-batch-$BATCH" "" || finish failed tampered
}

# ar_step NAME SIDE CMD...: the step's exit code (the job ends if it tampered). With AR_STEP_LIMIT
# (seconds) set, the step is ended from outside the sandbox 10 seconds after that limit: the run
# script's own `timeout` runs inside the step, as the step's user, which can stop it (ptrace), and
# the step would then run until the job's deadline. Exit 124, as for a timeout.
ar_step() {
  local name=$1 side=$2 rc
  local -a envs=() limit=()
  shift 2
  if [[ ${AR_STEP_LIMIT:-} =~ ^[0-9]+$ ]]; then
    limit=(timeout --foreground -k 5 "$((AR_STEP_LIMIT + 10))")
  fi
  if [ "$AR_MODE" = none ]; then
    # Without isolation a candidate's process can outlive its step: what changed since the last
    # step ended is its doing (the harness ran nothing), so look before this step can hide it.
    [ -z "$AR_LAST" ] || ar_check "after-$AR_LAST" "" || finish failed tampered
    (cd "$(ar_tree "$side")" && "${limit[@]}" env -u AUTORESEARCH_NONCE "${AR_SCRUB[@]}" "$@") 2>&1 | ar_escape
    rc=${PIPESTATUS[0]}
  else
    if [ -n "$AR_CCACHE" ]; then
      envs+=("CCACHE_DIR=$AR_CCACHE")
      [ "$side" = A ] || envs+=(CCACHE_READONLY=1 CCACHE_TEMPDIR=/tmp/ccache-tmp)
    fi
    "${limit[@]}" env -u AUTORESEARCH_NONCE "${AR_SCRUB[@]}" HOME=/tmp/home TMPDIR=/tmp "${envs[@]}" \
      "$AR_JAIL" "$AR_STATE/plan-$side" -- "$@" 2>&1 | ar_escape
    rc=${PIPESTATUS[0]}
  fi
  ar_check "$name" "$side" || finish failed tampered
  AR_LAST=$name
  return "$rc"
}
