#!/usr/bin/env bash
# Stop what up.sh started (by recorded PID) and remove its run-time state: SkyPilot's API server,
# Slurm jobs and daemons, the login sshd, SkyPilot's state, the ~/.slurm/config entry.
# Kept for a faster next up.sh: the packages, the login user, the python3.10 and uv copies, logs.
# `down.sh --purge` removes those too (but never the packages). Idempotent.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ "$(id -u)" = 0 ] || die "run as root"
purge=
case "${1:-}" in
  "") ;;
  --purge) purge=1 ;;
  *) die "unknown argument '$1' (only --purge)" ;;
esac
t_start=$SECONDS

# SkyPilot's API server on our port only (sky.api_stop matches the port and never starts one).
if [ -d "$SKY_RUNTIME" ] && "$PY" -c 'import sky' >/dev/null 2>&1; then
  sky_env
  mkdir -p "$STATE/log"
  "$PY" -c 'import sky; sky.api_stop()' >>"$STATE/log/down.out" 2>&1 || log "warning: sky api stop failed (see $STATE/log/down.out)"
fi

# Clusters still up hold Slurm allocations: cancel them before the daemons go.
if daemon_pid slurmctld >/dev/null && id -u "$LOGIN_USER" >/dev/null 2>&1; then
  scancel --user "$LOGIN_USER" 2>/dev/null || true
  for _ in $(seq 30); do
    [ -z "$(squeue -h --user "$LOGIN_USER" 2>/dev/null)" ] && break
    sleep 1
  done
fi

for d in sshd slurmd slurmctld munged; do stop_daemon "$d"; done

# What the clusters started as the dedicated login user and left behind (e.g. a skylet that
# detached from its Slurm step), ended one PID at a time.
if id -u "$LOGIN_USER" >/dev/null 2>&1; then
  for pid in $(ps -u "$LOGIN_USER" -o pid= || true); do
    log "ending leftover $LOGIN_USER process $pid ($(ps -p "$pid" -o comm= || true))"
    kill "$pid" 2>/dev/null || true
  done
  sleep 1
  for pid in $(ps -u "$LOGIN_USER" -o pid= || true); do kill -9 "$pid" 2>/dev/null || true; done
fi

# SkyPilot's and Slurm's state describe clusters that no longer exist.
rm -rf "$SKY_RUNTIME" "$SKY_CONFIG" "$ENV_FILE" "$STATE/run" "$STATE/slurm/ctld" "$STATE/slurm/d"
[ ! -d "$SKY_WORKDIR" ] || find "$SKY_WORKDIR" -mindepth 1 -delete
if [ -f "$SLURM_SSH_CONFIG" ]; then
  sed -i '/^# BEGIN autoresearch-slurm/,/^# END autoresearch-slurm/d' "$SLURM_SSH_CONFIG"
  if [ ! -s "$SLURM_SSH_CONFIG" ]; then
    rm -f "$SLURM_SSH_CONFIG"
    rmdir "$(dirname "$SLURM_SSH_CONFIG")" 2>/dev/null || true
  fi
fi

if [ -n "$purge" ]; then
  log "purging the login user (and its uv cache in /tmp), config files and $STATE"
  if id -u "$LOGIN_USER" >/dev/null 2>&1; then
    find /tmp -mindepth 1 -maxdepth 1 -user "$LOGIN_USER" -exec rm -rf {} +
  fi
  ! id -u "$LOGIN_USER" >/dev/null 2>&1 || userdel --remove "$LOGIN_USER" 2>/dev/null || true
  for f in "$SLURM_CONF" "$PROFILE_D" "$LD_CONF"; do
    if [ -f "$f" ] && grep -qF "$MARKER" "$f" 2>/dev/null; then rm -f "$f"; fi
  done
  # ld.so.conf.d files hold a bare path, no marker: ours is known by its content.
  if [ -f "$LD_CONF" ] && [ "$(cat "$LD_CONF")" = "$STATE/python3.10/lib" ]; then rm -f "$LD_CONF"; fi
  ldconfig
  rm -rf "$STATE"
fi
log "down in $((SECONDS - t_start))s"
