#!/usr/bin/env bash
# Undoes tests/realkube/up.sh, also after a failed or interrupted start: deletes
# the kind cluster, puts back the global kernel settings its node changed and
# /lib/modules, stops the tests' dockerd and removes its bridges; then checks
# that nothing is left (no process of the dockerd, no mount under its roots, the
# host's iptables rules as before) and fails, naming it, if something is.
# Keeps the caches (images, BuildKit's cargo caches, the node image).
set -uo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
export PATH
PATH=$(rk_tools_path)
left=0
if rk_docker version >/dev/null 2>&1; then
  if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    kind delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || { rk_log "kind delete cluster --name $KIND_CLUSTER failed"; left=1; }
  fi
fi
bash "$RK_DIR/dockerd.sh" stop || left=1
if [ -s "$RK_STATE/sysctl.before" ]; then
  while IFS="$(printf '\t')" read -r f before; do
    now=$( { tr '\n\t' '  ' <"$f"; } 2>/dev/null) || continue
    [ "$now" = "$before" ] && continue
    if printf '%s\n' "$before" >"$f" 2>/dev/null; then rk_log "restored ${f#/proc/sys/}: $now -> $before"
    else rk_log "cannot restore ${f#/proc/sys/} ($now, was $before)"; left=1; fi
  done <"$RK_STATE/sysctl.before"
  rm -f "$RK_STATE/sysctl.before"
fi
if [ -e "$RK_STATE/made-lib-modules" ]; then
  rmdir /lib/modules 2>/dev/null || [ ! -e /lib/modules ] || { rk_log "cannot remove /lib/modules (made by kind's bind mount)"; left=1; }
  rm -f "$RK_STATE/made-lib-modules"
fi
if [ -e "$RK_STATE/iptables.before" ]; then
  now=$(iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' || true)
  if [ "$now" != "$(cat "$RK_STATE/iptables.before")" ]; then
    rk_log "the host's iptables rules changed: $(diff <(echo "$now") "$RK_STATE/iptables.before" | head -n 10 | tr '\n' ';')"
    left=1
  fi
  rm -f "$RK_STATE/iptables.before"
fi
if pgrep -f -- "$RK_DOCKER_EXEC" >/dev/null; then
  rk_log "left running: $(pgrep -af -- "$RK_DOCKER_EXEC" | tr '\n' ';')"; left=1
fi
if awk '{print $2}' /proc/mounts | grep -qE "^($RK_DOCKER_EXEC|$RK_DOCKER_ROOT)(/|\$)"; then
  rk_log "left mounted: $(awk '{print $2}' /proc/mounts | grep -E "^($RK_DOCKER_EXEC|$RK_DOCKER_ROOT)(/|\$)" | tr '\n' ' ')"; left=1
fi
if ip link show "$RK_DOCKER_BRIDGE" >/dev/null 2>&1; then rk_log "left: interface $RK_DOCKER_BRIDGE"; left=1; fi
rm -rf "$RK_BIN" "$RK_KUBECONFIG" "$RK_STATE/cert-manager.yaml"
exit "$left"
