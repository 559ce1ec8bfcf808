# shellcheck shell=bash disable=SC2034  # the variables are for the scripts that source this
# Settings and helpers shared by up.sh and down.sh (sourced, not run).
# Every setting can be overridden from the environment; down.sh must see the same values as up.sh.

STATE=${AUTORESEARCH_SLURM_STATE:-/var/lib/autoresearch-slurm}
LOGIN_USER=${AUTORESEARCH_SLURM_USER:-arslurm}
SSH_PORT=${AUTORESEARCH_SLURM_SSH_PORT:-2222}
CLUSTER=${AUTORESEARCH_SLURM_CLUSTER:-autoresearch}
PARTITION=${AUTORESEARCH_SLURM_PARTITION:-debug}
# A SkyPilot API server of our own (port + runtime dir), so a developer's own server and state
# are never touched and `sky api stop` stops only ours.
API_PORT=${AUTORESEARCH_SLURM_API_PORT:-46680}
# Pinned so every machine runs the same uv on the nodes (SkyPilot would fetch the latest).
UV_VERSION=${AUTORESEARCH_SLURM_UV_VERSION:-0.13.9}

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
if [ -n "${AUTORESEARCH_PYTHON:-}" ]; then
  PY=$AUTORESEARCH_PYTHON
elif [ -x "$REPO_DIR/.venv/bin/python" ]; then
  PY=$REPO_DIR/.venv/bin/python
else
  PY=python3
fi

NODE=$(hostname -s)
LOGIN_HOME=/home/$LOGIN_USER
SKY_WORKDIR=$LOGIN_HOME/sky
INFRA=slurm/$CLUSTER/$PARTITION
ENV_FILE=$STATE/env.sh
SKY_RUNTIME=$STATE/sky/runtime
SKY_CONFIG=$STATE/sky/config.yaml
CLIENT_KEY=$STATE/client/id_ed25519
SLURM_CONF=/etc/slurm/slurm.conf
PROFILE_D=/etc/profile.d/autoresearch-slurm.sh
LD_CONF=/etc/ld.so.conf.d/autoresearch-slurm.conf
SLURM_SSH_CONFIG=$HOME/.slurm/config
MARKER="# Managed by autoresearch scripts/slurm/up.sh"

log() { printf '[slurm %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# What a SkyPilot client needs to use the test cluster (up.sh writes it to env.sh). Telemetry is
# off before any sky call: the API server inherits these.
env_lines() {
  cat <<EOF
export SKYPILOT_DISABLE_USAGE_COLLECTION=1 DO_NOT_TRACK=1 SCARF_NO_ANALYTICS=1
export SKY_RUNTIME_DIR=$SKY_RUNTIME
export SKYPILOT_GLOBAL_CONFIG=$SKY_CONFIG
export SKYPILOT_API_SERVER_LOCAL_PORT=$API_PORT
export AUTORESEARCH_SLURM_STATE=$STATE
export AUTORESEARCH_SLURM_INFRA=$INFRA
export AUTORESEARCH_SLURM_SSH_PORT=$SSH_PORT
EOF
}
sky_env() { eval "$(env_lines)"; }

# The PID recorded for a daemon, if that process is alive and still runs that program.
daemon_pid() {
  local name=$1 pid
  pid=$(cat "$STATE/run/$name.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "$name" ] || return 1
  echo "$pid"
}

stop_daemon() {
  local name=$1 pid child
  if pid=$(daemon_pid "$name"); then
    log "stopping $name (pid $pid)"
    if [ "$name" = sshd ]; then
      # Connection handlers (each in its own session) outlive the listener: end them too, so
      # SkyPilot's cached ControlMaster connections close and the next ones see the new config.
      for child in $(pgrep -P "$pid" || true); do kill "$child" 2>/dev/null || true; done
    fi
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$STATE/run/$name.pid"
}
