# shellcheck shell=bash
# Common settings and helpers for the inplace test bed (sourced by up/down/build-k8s/selftest).

TESTBED_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$TESTBED_DIR/../.." && pwd)"
CRDS_DIR="${INPLACE_CRDS_DIR:-$REPO_DIR/deploy/crds}"
K8S_VERSION=1.20.2
K8S_DEB_VERSION="1.20.5+really1.20.2"
BED="${INPLACE_TESTBED_DIR:-/var/tmp/inplace-testbed}"
CACHE="${INPLACE_CACHE_DIR:-/var/tmp/inplace-cache}"
case $BED in /?*/*|/var/tmp/*|/tmp/*) ;; *) echo "testbed: error: INPLACE_TESTBED_DIR must be an absolute path at least two levels deep (got '$BED')" >&2; exit 1 ;; esac
BED=${BED%/}
K8S_CACHE="$CACHE/kubernetes-$K8S_VERSION"
K8S_BIN="$K8S_CACHE/bin"
KUBECTL_DIR="$CACHE/kubectl-$K8S_VERSION"
KUBECTL="$KUBECTL_DIR/usr/bin/kubectl"
APT_SRC_FILE=/etc/apt/sources.list.d/inplace-testbed-src.sources
APT_STAMP="$CACHE/.apt-updated"

# Ports (all on 127.0.0.1).
ETCD_CLIENT_PORT=${INPLACE_ETCD_PORT:-23790}
ETCD_PEER_PORT=${INPLACE_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${INPLACE_APISERVER_PORT:-16443}
REGISTRY_PORT=${INPLACE_REGISTRY_PORT:-5000}
KUBELET_PORT=${INPLACE_KUBELET_PORT:-10250}
KUBELET_HEALTHZ_PORT=${INPLACE_KUBELET_HEALTHZ_PORT:-10248}
CM_PORT=${INPLACE_CM_PORT:-10257}
SCHED_PORT=${INPLACE_SCHED_PORT:-10259}
REGISTRY="127.0.0.1:$REGISTRY_PORT"

NODE_NAME=${INPLACE_NODE_NAME:-inplace-node-0}
BRIDGE=inplacebr0
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1
# Host paths hard-coded by kubelet 1.20 / containerd 1.6; removed by down if up created them.
HOST_PATHS="/var/log/pods /var/log/containers /var/lib/kubelet /run/containerd"

# Cargo's target dir, as tests/run-all and the other scripts set it: outside the work tree.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
# The node simulator: $INPLACE_NODESIM_BIN, else the release binary in cargo's target dir.
SIM_BIN=${INPLACE_NODESIM_BIN:-$CARGO_TARGET_DIR/release/inplace-nodesim}

log() { printf '[testbed %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf 'testbed: error: %s\n' "$*" >&2; exit 1; }

need_root() {
  [ "$(id -u)" = 0 ] || die "must run as root (the bed starts containerd and a kubelet); rerun with sudo"
}

# One up/down at a time on this machine (nested calls, e.g. up -> down, inherit the lock).
bed_lock() {
  [ "${INPLACE_TESTBED_LOCKED:-}" = "$BED" ] && return 0
  mkdir -p "$CACHE"
  exec 8>"$CACHE/testbed.lock"
  if ! flock -n 8; then
    log "waiting for another tests/testbed/up or down to finish"
    flock -w 900 8 || die "another tests/testbed/up or down holds $CACHE/testbed.lock"
  fi
  export INPLACE_TESTBED_LOCKED="$BED"
}

# apt-get update at most once per cache lifetime (or when forced).
apt_update_once() {
  mkdir -p "$CACHE"
  if [ ! -e "$APT_STAMP" ] || [ "${1:-}" = force ]; then
    log "apt-get update"
    if ! DEBIAN_FRONTEND=noninteractive apt-get update -q >"$CACHE/apt-update.log" 2>&1 \
       || grep -qE '^(Err|W: Failed)' "$CACHE/apt-update.log"; then
      tail -5 "$CACHE/apt-update.log" >&2
      die "apt-get update failed: the Debian package registry is unreachable (check network/apt sources)"
    fi
    touch "$APT_STAMP"
  fi
}

ensure_deb_src() {
  if [ ! -e "$APT_SRC_FILE" ]; then
    log "adding deb-src entry $APT_SRC_FILE"
    cat >"$APT_SRC_FILE" <<EOS
# Added by inplace tests/testbed: source packages (kubernetes) for the test bed.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
    apt_update_once force
  fi
}

# Install Debian packages without starting their services.
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update_once
  log "apt-get install ${missing[*]}"
  local prc=/usr/sbin/policy-rc.d had_prc=0
  [ -e "$prc" ] && had_prc=1
  if [ $had_prc = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' >"$prc"; chmod +x "$prc"
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    >"$CACHE/apt-install.log" 2>&1 || rc=$?
  [ $had_prc = 0 ] && rm -f "$prc"
  if [ $rc != 0 ]; then
    tail -15 "$CACHE/apt-install.log" >&2
    die "apt-get install ${missing[*]} failed (see $CACHE/apt-install.log)"
  fi
  # The bed runs its own etcd/containerd/registry, never the packaged services: policy-rc.d
  # kept them from starting; on a systemd machine also keep them from starting at boot.
  if [ -d /run/systemd/system ]; then
    for p in "${missing[@]}"; do
      case $p in
        etcd-server) systemctl disable --now etcd >/dev/null 2>&1 || true ;;
        containerd|docker-registry) systemctl disable --now "$p" >/dev/null 2>&1 || true ;;
      esac
    done
  fi
}

# ---------- processes ----------
PIDS="$BED/pids"
LOGS="$BED/logs"

# start_bg NAME CMD... : start CMD detached (own session), log to $LOGS/NAME.log, pid to $PIDS/NAME.pid
start_bg() {
  local name=$1; shift
  mkdir -p "$PIDS" "$LOGS"
  # Every descriptor above 2 is closed first: a bed process must not keep a caller's file
  # open, e.g. the lock of `flock LOCK tests/testbed/up`, which it would hold for as long
  # as the bed runs (ours are 8 and 9).
  setsid bash -c 'for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@"' \
    start_bg "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
  echo "$name" >>"$BED/started"
}

# running PID: exists and is not a zombie (PID 1 here may reap orphans late).
running() {
  local st
  st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

pid_of() { [ -f "$PIDS/$1.pid" ] && cat "$PIDS/$1.pid"; }
alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && running "$p"; }

# stop_pid PID [GRACE_SECONDS]: TERM, wait, then KILL.
stop_pid() {
  local p=$1 grace=${2:-10} i
  running "$p" || return 0
  kill -TERM "$p" 2>/dev/null || true
  for ((i = 0; i < grace * 20; i++)); do running "$p" || return 0; sleep 0.05; done
  kill -KILL "$p" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do running "$p" || return 0; sleep 0.05; done
}

stop_component() {
  local name=$1 p
  p=$(pid_of "$name") || return 0
  if [ -n "$p" ] && running "$p"; then log "stopping $name (pid $p)"; stop_pid "$p" "${2:-10}"; fi
  rm -f "$PIDS/$name.pid"
}

# wait_for DESCRIPTION TIMEOUT_S COMPONENT CMD... : poll CMD until it succeeds; fail if
# COMPONENT died or the timeout passed.
wait_for() {
  local what=$1 timeout=$2 comp=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$comp" ] && ! alive "$comp"; then fail "$comp exited while waiting for $what" "$comp"; fi
    [ $SECONDS -lt $deadline ] || fail "timed out after ${timeout}s waiting for $what" "$comp"
    sleep 0.2
  done
}

# fail MESSAGE [COMPONENT]: print the component's log tail, stop everything, exit 1.
fail() {
  local msg=$1 comp=${2:-}
  printf 'testbed: error: %s\n' "$msg" >&2
  if [ -n "$comp" ] && [ -f "$LOGS/$comp.log" ]; then
    printf -- '---- last 30 lines of %s ----\n' "$LOGS/$comp.log" >&2
    tail -n 30 "$LOGS/$comp.log" >&2
    printf -- '----\n' >&2
  fi
  if [ "${INPLACE_TESTBED_KEEP_ON_FAILURE:-0}" != 1 ]; then
    log "stopping what was started (logs kept in $LOGS)"
    "$TESTBED_DIR/down" --keep-logs >&2 || true
  fi
  exit 1
}

kc() { "$KUBECTL" --kubeconfig "$BED/kubeconfig" "$@"; }

# bed_leftovers [HOST_PATHS_THE_BED_CREATED]: prints one line per process, mount, cgroup,
# socket, bridge or host path of the bed that still exists; prints nothing when clean.
bed_leftovers() {
  local out="" d cmd m cg hp veths
  # The pod cgroups, the bridge and the Service shim are the real node's: a control plane
  # without one (up --no-real-node) leaves them to the bed that has it.
  local node=${BED_REAL_NODE:-1}
  for d in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
    # processes the bed starts (clients that merely use its kubeconfig are not the bed's;
    # Kubernetes binaries are this bed's when their arguments name its directory: a second
    # control plane of another INPLACE_TESTBED_DIR may run from the same cached binaries)
    case $cmd in
      *"$K8S_BIN/"*"$BED/"*|*"$BED/containerd/"*|*"--data-dir $BED/etcd"*|*"$BED/registry.yml"*|*"$BED/nodesim.kubeconfig"*)
        out+="process ${d#/proc/}: ${cmd:0:120}"$'\n' ;;
    esac
  done
  m=$(awk -v b="$BED/" 'index($2, b) == 1 { print "mount " $2 }' /proc/mounts)
  [ -n "$m" ] && out+="$m"$'\n'
  [ -S "$BED/containerd/containerd.sock" ] && out+="socket $BED/containerd/containerd.sock"$'\n'
  if [ "$node" = 1 ]; then
    for cg in /sys/fs/cgroup/*/inplace-testbed /sys/fs/cgroup/inplace-testbed; do
      [ -e "$cg" ] && out+="cgroup $cg"$'\n'
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && out+="bridge $BRIDGE"$'\n'
    veths=$(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}')
    [ -n "$veths" ] && out+="veths $veths"$'\n'
    if command -v iptables >/dev/null && iptables -t nat -S 2>/dev/null | grep -q "inplace-testbed kubernetes service"; then
      out+="iptables nat rules \"inplace-testbed kubernetes service\""$'\n'
    fi
  fi
  for hp in ${1:-}; do [ -e "$hp" ] && out+="host path $hp"$'\n'; done
  printf '%s' "$out"
}

# The daemon's default CRI socket path, where tests/docs/readme-install binds the bed's
# containerd socket for the README's manifests (they do not name a socket).
DEFAULT_CRI_SOCK=/run/containerd/containerd.sock
# unbind_bed_cri_sock: removes that bind when it is the bed's socket. A run killed before its
# cleanup leaves it, and a mount there makes down's removal of /run/containerd fail and the
# next README check refuse to start. A real containerd's socket there is left alone.
unbind_bed_cri_sock() {
  local src here ours
  findmnt -rn --mountpoint "$DEFAULT_CRI_SOCK" >/dev/null 2>&1 || return 0
  src=$(findmnt -rn -o SOURCE --mountpoint "$DEFAULT_CRI_SOCK")
  here=$(stat -Lc %d:%i "$DEFAULT_CRI_SOCK" 2>/dev/null || true)
  ours=$(stat -Lc %d:%i "$BED/containerd/containerd.sock" 2>/dev/null || true)
  # The same inode while containerd runs; the path in findmnt's source once its socket is gone.
  if { [ -n "$here" ] && [ "$here" = "$ours" ]; } || [[ $src == *"[$BED/containerd/containerd.sock"* ]]; then
    log "unmounting the bed's containerd socket left bound at $DEFAULT_CRI_SOCK"
    umount "$DEFAULT_CRI_SOCK" && rm -f "$DEFAULT_CRI_SOCK"
  fi
}

# ---------- the "kubernetes" Service for pods (used by tests/testbed/install) ----------
# The bed runs no kube-proxy and its apiserver listens on 127.0.0.1 only. Pods that use the
# in-cluster config (KUBERNETES_SERVICE_HOST=$SERVICE_IP, port 443), i.e. the installed
# controller and daemon, reach it through two DNAT rules: from the pod network (the bed
# bridge, which needs route_localnet to deliver to 127.0.0.1) and from the host's own
# network namespace (hostNetwork pods). The service range is routed onto the bed bridge, so
# a packet to it never leaves the machine even without the rules.
SERVICE_SHIM_COMMENT="inplace-testbed kubernetes service"
service_shim_rules() { # prints "CHAIN RULE..." lines
  echo "PREROUTING -i $BRIDGE -d $SERVICE_IP/32 -p tcp --dport 443 -m comment --comment \"$SERVICE_SHIM_COMMENT\" -j DNAT --to-destination 127.0.0.1:$APISERVER_PORT"
  echo "OUTPUT -d $SERVICE_IP/32 -p tcp --dport 443 -m comment --comment \"$SERVICE_SHIM_COMMENT\" -j DNAT --to-destination 127.0.0.1:$APISERVER_PORT"
}
service_shim_up() {
  command -v iptables >/dev/null || apt_install iptables
  ip link show "$BRIDGE" >/dev/null 2>&1 || die "bed bridge $BRIDGE not found: is the bed up with its real node?"
  ip route replace "$SERVICE_CIDR" dev "$BRIDGE"
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  local chain rule
  while read -r chain rule; do
    eval "set -- $rule"
    iptables -t nat -C "$chain" "$@" 2>/dev/null || iptables -t nat -A "$chain" "$@"
  done < <(service_shim_rules)
}
service_shim_down() {
  command -v iptables >/dev/null || return 0
  local chain rule
  while read -r chain rule; do
    eval "set -- $rule"
    while iptables -t nat -C "$chain" "$@" 2>/dev/null; do iptables -t nat -D "$chain" "$@"; done
  done < <(service_shim_rules)
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip route del "$SERVICE_CIDR" dev "$BRIDGE" 2>/dev/null || true
    sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=0" || true
  fi
}
