#!/usr/bin/env bash
# Bring up a one-node Slurm cluster on this machine that SkyPilot's Slurm infra can launch on,
# with no internet: Debian's slurm + munge, and a private sshd on 127.0.0.1 as the login node.
# Idempotent: run it again at any time. Needs root. See README.md beside this file.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ "$(id -u)" = 0 ] || die "run as root (it installs packages, adds a user and starts daemons)"
t_start=$SECONDS

# Writes stdin to $1 (mode $2, owned by root) when the content differs; succeeds only if it changed.
put_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  mkdir -p "$(dirname "$path")"
  install -m "$mode" "$tmp" "$path"
  rm -f "$tmp"
}

# A file some other tool or person wrote is never overwritten.
check_ours() {
  [ ! -e "$1" ] || grep -qF "$MARKER" "$1" || die "$1 exists and was not written by up.sh; move it away first"
}

start_daemon() {
  local name=$1 pid
  shift
  if pid=$(daemon_pid "$name"); then
    return 0
  fi
  log "starting $name"
  # setsid: own session, so the daemon outlives this script and its caller's terminal.
  setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 &
  echo $! >"$STATE/run/$name.pid"
  # setsid and setpriv exec in place, so the recorded PID becomes the daemon itself.
  wait_for 5 "$name process" daemon_pid "$name"
}

# Polls "$@" until it succeeds, at most $1 seconds.
wait_for() {
  local limit=$1 what=$2 i
  shift 2
  for ((i = 0; i < limit * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "$what not ready after ${limit}s (logs in $STATE/log)"
}

# --- 1. Packages -------------------------------------------------------------------------------
packages=(slurmctld slurmd slurm-client munge openssh-server rsync)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  # No init system here: keep the packages' scripts from starting a system sshd on port 22 or a
  # munged that would hold the socket ours needs.
  policy_added=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    policy_added=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$policy_added" ] || rm -f /usr/sbin/policy-rc.d
fi
t_packages=$SECONDS

# --- 2. Login user and directories -------------------------------------------------------------
if ! id -u "$LOGIN_USER" >/dev/null 2>&1; then
  log "adding login user $LOGIN_USER"
  useradd --create-home --home-dir "$LOGIN_HOME" --shell /bin/bash --user-group "$LOGIN_USER"
fi
# sshd without PAM refuses a locked account ('!' password) even for key logins: '*' = no password.
usermod -p '*' "$LOGIN_USER"
install -d -m 755 "$STATE" "$STATE/run" "$STATE/log" "$STATE/bin" "$STATE/login" \
  "$STATE/slurm" "$STATE/slurm/ctld" "$STATE/slurm/d"
install -d -m 700 "$STATE/sshd" "$STATE/client" "$STATE/sky" "$SKY_RUNTIME"
install -d -m 755 -o "$LOGIN_USER" -g "$LOGIN_USER" "$SKY_WORKDIR"

# --- 3. Offline tools for the nodes: python3.10 and uv -----------------------------------------
# SkyPilot runs `uv venv --python 3.10` on each node as the login user. pyenv's 3.10 lives under
# /root (mode 700) and its binary finds libpython through an absolute RUNPATH there, so the user
# gets a copy, whose libpython is found through ld.so.conf instead.
user_runs() { setpriv --reuid "$LOGIN_USER" --regid "$LOGIN_USER" --init-groups "$@"; }
py310=$STATE/python3.10/bin/python3.10
if ! user_runs "$py310" -c 'import ssl, venv' >/dev/null 2>&1; then
  src=
  for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python3.10 /root/.pyenv/versions/3.10*/bin/python3.10 \
    /usr/local/bin/python3.10 /usr/bin/python3.10; do
    if [ -x "$cand" ] && "$cand" -c 'import ssl, venv' >/dev/null 2>&1; then
      src=$cand
      break
    fi
  done
  [ -n "$src" ] || die "no python3.10 found (pyenv's versions/3.10*, /usr/bin, /usr/local/bin): SkyPilot's nodes need one"
  prefix=$("$src" -c 'import sys; print(sys.base_prefix)')
  log "copying python3.10 from $prefix"
  rm -rf "$STATE/python3.10"
  cp -a "$prefix" "$STATE/python3.10"
  chmod -R a+rX "$STATE/python3.10"
fi
if [ -e "$STATE/python3.10/lib/libpython3.10.so.1.0" ]; then
  echo "$STATE/python3.10/lib" | put_file "$LD_CONF" 644 || true
  ldconfig
fi
user_runs "$py310" -c 'import ssl, venv' || die "$py310 does not run as $LOGIN_USER"
ln -sfn "$py310" "$STATE/bin/python3.10"

if [ "$("$STATE/uv/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  log "installing uv $UV_VERSION from PyPI"
  rm -rf "$STATE/uv"
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$STATE/uv" "uv==$UV_VERSION"
  chmod -R a+rX "$STATE/uv"
fi

# SkyPilot runs `curl -LsSf https://astral.sh/uv/install.sh | sh` on each new cluster. For exactly
# that URL this curl prints an installer that copies our uv; everything else goes to real curl.
put_file "$STATE/bin/curl" 755 <<EOF || true
#!/bin/sh
$MARKER: answers SkyPilot's uv installer URL offline.
for arg in "\$@"; do
  if [ "\$arg" = "https://astral.sh/uv/install.sh" ]; then
    cat <<'INSTALLER'
#!/bin/sh
set -e
dir="\${UV_INSTALL_DIR:-\$HOME/.local/bin}"
mkdir -p "\$dir"
cp "$STATE/uv/bin/uv" "\$dir/uv"
if [ -e "$STATE/uv/bin/uvx" ]; then cp "$STATE/uv/bin/uvx" "\$dir/uvx"; fi
INSTALLER
    exit 0
  fi
done
exec /usr/bin/curl "\$@"
EOF

# SkyPilot's commands run under `bash --login`, which resets PATH from /etc/profile: add our tools
# there, only in shells that our sshd started (it alone sets AUTORESEARCH_SLURM_LOGIN).
check_ours "$PROFILE_D"
put_file "$PROFILE_D" 644 <<EOF || true
$MARKER: tools for SkyPilot's shells on the test login node only.
if [ -n "\${AUTORESEARCH_SLURM_LOGIN:-}" ]; then
  PATH="$STATE/bin:\$PATH"
  export PATH
fi
EOF

# --- 4. Munge and Slurm ------------------------------------------------------------------------
install -d -m 755 -o munge -g munge /run/munge
install -d -m 700 -o munge -g munge /var/lib/munge /var/log/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating the munge key"
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key

cpus=${AUTORESEARCH_SLURM_CPUS:-$(nproc)}
mem_mb=${AUTORESEARCH_SLURM_MEMORY_MB:-$(awk '/^MemTotal:/ {print int($2 / 1024 * 3 / 4)}' /proc/meminfo)}
check_ours "$SLURM_CONF"
slurm_changed=
put_file "$SLURM_CONF" 644 <<EOF && slurm_changed=1
$MARKER: a one-node cluster on loopback for tests.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# No cgroups or systemd here.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
# Listen on the node's own address (127.0.0.1 below), not on every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$STATE/slurm/ctld
SlurmdSpoolDir=$STATE/slurm/d
SlurmctldPidFile=$STATE/run/slurmctld.own.pid
SlurmdPidFile=$STATE/run/slurmd.own.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# Trust the CPUs and memory below rather than the hardware (AUTORESEARCH_SLURM_CPUS may advertise
# more CPUs than exist, so several clusters share cores: fine for protocol tests, not benchmarks).
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE DefaultTime=01:00:00 State=UP
EOF
if [ -n "$slurm_changed" ]; then
  stop_daemon slurmd
  stop_daemon slurmctld
fi

start_daemon munged setpriv --reuid munge --regid munge --init-groups /usr/sbin/munged --foreground
wait_for 20 munged bash -c 'munge -n | unmunge'
start_daemon slurmctld /usr/sbin/slurmctld -D -i
wait_for 30 slurmctld scontrol ping
start_daemon slurmd /usr/sbin/slurmd -D

node_state() { sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n1; }
for ((i = 0; i < 60; i++)); do
  state=$(node_state)
  case "$state" in
    idle | mix | alloc) break ;;
    # A node left down or drained by an earlier run (e.g. its slurmd was killed) comes back.
    down* | drain* | fail*) scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 1
done
case "$state" in
  idle | mix | alloc) ;;
  *) die "node $NODE is '$state', not idle: $(sinfo -h -N -n "$NODE" -o '%E') (logs in $STATE/log)" ;;
esac
t_slurm=$SECONDS

# --- 5. Login node: sshd on 127.0.0.1 ----------------------------------------------------------
[ -f "$STATE/sshd/host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C autoresearch-slurm-host -f "$STATE/sshd/host_ed25519_key"
[ -f "$CLIENT_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C autoresearch-slurm-client -f "$CLIENT_KEY"
put_file "$STATE/login/authorized_keys" 644 <"$CLIENT_KEY.pub" || true
cert_env=
[ ! -f /etc/ssl/certs/ca-certificates.crt ] || cert_env=" SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"
sshd_changed=
put_file "$STATE/sshd/sshd_config" 600 <<EOF && sshd_changed=1
$MARKER: the login node of the test cluster.
ListenAddress 127.0.0.1
Port $SSH_PORT
HostKey $STATE/sshd/host_ed25519_key
PidFile $STATE/run/sshd.own.pid
AllowUsers $LOGIN_USER
PermitRootLogin no
PubkeyAuthentication yes
AuthorizedKeysFile $STATE/login/authorized_keys .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 200
MaxStartups 200:30:400
X11Forwarding no
PrintMotd no
Subsystem sftp /usr/lib/openssh/sftp-server
# uv must not download Pythons (python3.10 is on PATH) and must trust the machine's CA bundle.
SetEnv AUTORESEARCH_SLURM_LOGIN=1 UV_PYTHON_DOWNLOADS=never$cert_env
EOF
[ -z "$sshd_changed" ] || stop_daemon sshd
install -d -m 755 /run/sshd
/usr/sbin/sshd -t -f "$STATE/sshd/sshd_config" || die "sshd rejects $STATE/sshd/sshd_config"
start_daemon sshd /usr/sbin/sshd -D -f "$STATE/sshd/sshd_config" -E "$STATE/log/sshd.log"

login() {
  ssh -F /dev/null -p "$SSH_PORT" -i "$CLIENT_KEY" -o IdentitiesOnly=yes -o BatchMode=yes \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o ConnectTimeout=5 "$LOGIN_USER@127.0.0.1" "$@"
}
wait_for 20 "ssh login on 127.0.0.1:$SSH_PORT" login true
# What a SkyPilot node does first, as the login user, through Slurm: the uv installer, a Python
# 3.10 that uv accepts without downloading, and a job step.
login bash --login -s >"$STATE/log/login-check.out" 2>&1 <<'EOF' || die "login node check failed: $(tail -n 5 "$STATE/log/login-check.out")"
set -e
tmp=$(mktemp -d)
curl -LsSf https://astral.sh/uv/install.sh | UV_INSTALL_DIR="$tmp" sh
"$tmp/uv" --version
"$tmp/uv" python find 3.10
rm -rf "$tmp"
srun --quiet --time=1 --ntasks=1 true
EOF
t_login=$SECONDS

# --- 6. SkyPilot: ~/.slurm/config, sky config, env file, sky check -----------------------------
# ~/.slurm/config is an ssh config that may list other clusters: only our block is rewritten.
block="# BEGIN autoresearch-slurm ($MARKER)
Host $CLUSTER
    HostName 127.0.0.1
    Port $SSH_PORT
    User $LOGIN_USER
    IdentityFile $CLIENT_KEY
    IdentitiesOnly yes
# END autoresearch-slurm"
{
  if [ -f "$SLURM_SSH_CONFIG" ]; then
    sed '/^# BEGIN autoresearch-slurm/,/^# END autoresearch-slurm/d' "$SLURM_SSH_CONFIG"
  fi
  printf '%s\n' "$block"
} | put_file "$SLURM_SSH_CONFIG" 600 || true

put_file "$SKY_CONFIG" 600 <<EOF || true
$MARKER
allowed_clouds: [slurm]
slurm:
  cluster_configs:
    $CLUSTER:
      workdir: $SKY_WORKDIR
EOF

{
  echo "$MARKER: source this before using SkyPilot against the test cluster."
  env_lines
} | put_file "$ENV_FILE" 644 || true

log "sky check slurm (SkyPilot's API server on 127.0.0.1:$API_PORT, started if needed)"
sky_env
"$PY" - "$STATE/log/sky-check.out" <<'EOF' || die "sky check slurm failed: see $STATE/log/sky-check.out"
import contextlib
import sys

with open(sys.argv[1], "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    import sky
    from sky.client import sdk

    enabled = sky.get(sdk.check(("slurm",), verbose=True))
    print(enabled)
ok = any("slurm" in (c.lower() for c in clouds) for clouds in enabled.values())
sys.exit(0 if ok else 1)
EOF
t_end=$SECONDS

log "up in $((t_end - t_start))s (packages $((t_packages - t_start))s, slurm $((t_slurm - t_packages))s," \
  "login $((t_login - t_slurm))s, sky check $((t_end - t_login))s)"
log "environment for tests: source $ENV_FILE"
echo "$INFRA"
