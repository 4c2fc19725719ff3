#!/usr/bin/env bash
# The dockerd of the real-cluster tests: builds the images and runs kind's node.
#   dockerd.sh start   creates the bridge $RK_DOCKER_BRIDGE, starts Debian's dockerd with
#                      its own data root, exec root, socket and pidfile (lib.sh) and waits
#                      until it answers; a second start is a no-op
#   dockerd.sh stop    removes kind's network, stops dockerd by PID (its containerd too),
#                      unmounts what is left under its roots, removes the bridges
# No iptables rules, no IP forwarding, no masquerade: nothing leaves the machine. Its
# default runtime is kind/runc-capfix (see its header: root here lacks a capability
# that dockerd asks for every privileged container, kind's node included).
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || rk_die "dockerd.sh needs root"
pidfile=$RK_DOCKER_EXEC/docker.pid
running() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
if [ "$RK_UPSTREAM_IMAGES" = 1 ]; then
  # The machine's own Docker is used (it reaches the registries): nothing to start or stop.
  [ "${1:-}" != start ] || rk_docker version >/dev/null 2>&1 || rk_die "RK_UPSTREAM_IMAGES=1 uses the machine's Docker, which does not answer"
  exit 0
fi

case "${1:-}" in
start)
  if running; then exit 0; fi
  for b in dockerd "$DOCKER_BIN" runc jq ip; do
    command -v "$b" >/dev/null || rk_die "missing $b (apt-get install docker.io runc jq iproute2)"
  done
  mkdir -p "$RK_DOCKER_ROOT" "$RK_DOCKER_EXEC" "$RK_STATE"
  if ! ip link show "$RK_DOCKER_BRIDGE" >/dev/null 2>&1; then
    if ip route | grep -q "^${RK_DOCKER_BRIDGE_CIDR%.*}\."; then
      rk_die "${RK_DOCKER_BRIDGE_CIDR%.*}.0/24 is already routed (set RK_DOCKER_BRIDGE_CIDR)"
    fi
    ip link add "$RK_DOCKER_BRIDGE" type bridge
    ip addr add "$RK_DOCKER_BRIDGE_CIDR" dev "$RK_DOCKER_BRIDGE"
    ip link set "$RK_DOCKER_BRIDGE" up
  fi
  install -m 0755 "$RK_DIR/kind/runc-capfix" "$RK_DOCKER_EXEC/runc-capfix"
  RUNC_REAL=$(command -v runc)   # the wrapper's runc, inherited through dockerd
  export RUNC_REAL
  echo '{}' >"$RK_DOCKER_EXEC/daemon.json"
  # setsid: its own session, so a Ctrl-C of the script that started it does not stop it
  # halfway; dockerd.sh stop (or down.sh) does.
  setsid dockerd --config-file "$RK_DOCKER_EXEC/daemon.json" --data-root "$RK_DOCKER_ROOT" \
    --exec-root "$RK_DOCKER_EXEC" --pidfile "$pidfile" -H "$DOCKER_HOST" --bridge "$RK_DOCKER_BRIDGE" \
    --add-runtime "capfix=$RK_DOCKER_EXEC/runc-capfix" --default-runtime capfix \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --default-address-pool "base=$RK_DOCKER_POOL,size=24" --storage-driver overlay2 \
    </dev/null >>"$RK_STATE/dockerd.log" 2>&1 &
  for i in $(seq 150); do
    rk_docker version >/dev/null 2>&1 && break
    [ "$i" = 150 ] && { tail -n 20 "$RK_STATE/dockerd.log" >&2; rk_die "dockerd did not answer within 30 s (log: $RK_STATE/dockerd.log)"; }
    sleep 0.2
  done
  ;;
stop)
  if running; then
    # kind's user network, so its bridge goes with it (kind delete cluster keeps it)
    rk_docker network rm kind >/dev/null 2>&1 || true
    pid=$(cat "$pidfile")
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$RK_DOCKER_EXEC"; then
      children=$(pgrep -P "$pid" || true)
      kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then
        rk_log "dockerd (pid $pid) ignored SIGTERM for 20 s; killing it"
        kill -KILL "$pid"
      fi
      for c in $children; do
        for _ in $(seq 50); do kill -0 "$c" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$c" 2>/dev/null && kill -KILL "$c"
      done
    fi
  fi
  awk '{print $2}' /proc/mounts | { grep -E "^($RK_DOCKER_EXEC|$RK_DOCKER_ROOT)(/|\$)" || true; } | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || rk_log "cannot unmount $m"; done
  rm -rf "$RK_DOCKER_EXEC"
  ip link del "$RK_DOCKER_BRIDGE" 2>/dev/null || true
  # bridges dockerd made for user networks on our pool, if it could not remove them
  for br in $(ip -o -4 addr show | awk -v p="${RK_DOCKER_POOL%.*.*}." 'index($4, p) == 1 {print $2}'); do
    case $br in br-*) ip link del "$br" 2>/dev/null && rk_log "removed leftover bridge $br" ;; esac
  done
  ;;
*) echo "usage: dockerd.sh start|stop" >&2; exit 2 ;;
esac
