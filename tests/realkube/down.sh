#!/usr/bin/env bash
# Undoes tests/realkube/up.sh, also after a failed or interrupted start:
# deletes the Pods (so the kubelet tears their sandboxes, mounts and CNI
# interfaces down), stops every process of $RK_STATE/pids by PID (each checked
# to still be ours), kills leftover container tasks and shims of our
# containerd, unmounts what is left under our directories, removes the
# iptables chains of kube-proxy and the kubelet, the bridge and the CNI
# network namespaces, and restores the sysctls. Then it checks that all of it
# is gone and fails, naming what is left, if not. Keeps the caches
# ($RK_CACHE and the built binaries).
set -uo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
S=$RK_STATE

stop() { # NAME: SIGTERM, then SIGKILL after 10 s
  local pid
  pid=$(rk_pid "$1")
  rk_ours "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  rk_log "$1 (pid $pid) did not stop on SIGTERM within 10 s; killing it"
  kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 25); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
}
have_containerd() { [ -S "$RK_RUN/containerd.sock" ] && ctr --address "$RK_RUN/containerd.sock" version >/dev/null 2>&1; }

if [ ! -e "$S/pids" ] && [ ! -e "$RK_RUN" ] && ! ip link show "$RK_BRIDGE" >/dev/null 2>&1; then
  rk_log "nothing to stop"
  exit 0
fi
# Nothing new is scheduled or created once these two are gone.
stop kube-scheduler
stop kube-controller-manager
if rk_ours "$(rk_pid kubelet)" && rk_ours "$(rk_pid kube-apiserver)"; then
  rk_kubectl delete pods --all -A --wait=false --grace-period=5 >/dev/null 2>&1
  for _ in $(seq 60); do [ -z "$(rk_ctr tasks ls -q 2>/dev/null)" ] && break; sleep 1; done
fi
for name in kube-proxy kubelet kube-apiserver etcd; do stop "$name"; done
if have_containerd; then
  # Sandboxes and containers the kubelet did not get to remove
  for t in $(rk_ctr tasks ls -q 2>/dev/null); do rk_ctr tasks kill -s KILL "$t" >/dev/null 2>&1; done
  sleep 1
  for t in $(rk_ctr tasks ls -q 2>/dev/null); do rk_ctr tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $(rk_ctr containers ls -q 2>/dev/null); do rk_ctr containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd
# Shims of our containerd (their -address names our socket), if it died before them
for p in $(pgrep -x containerd-shim-runc-v2 2>/dev/null); do
  if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$RK_RUN/containerd.sock"; then kill -KILL "$p" 2>/dev/null; fi
done
# kube-proxy's chains, then the kubelet's (it keeps them after it stops)
kp="${CNPGI_E2E_CACHE:-$HOME/.cache/cnpgi-e2e}/kube-proxy-$KUBE_VERSION/kube-proxy"
[ -x "$kp" ] && "$kp" --cleanup >/dev/null 2>&1
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for chain in INPUT OUTPUT; do while $ipt -D "$chain" -j KUBE-FIREWALL 2>/dev/null; do :; done; done
  $ipt -F KUBE-FIREWALL 2>/dev/null; $ipt -X KUBE-FIREWALL 2>/dev/null
  for t in filter nat mangle; do
    $ipt -t "$t" -F KUBE-KUBELET-CANARY 2>/dev/null; $ipt -t "$t" -X KUBE-KUBELET-CANARY 2>/dev/null
    $ipt -t "$t" -F KUBE-PROXY-CANARY 2>/dev/null; $ipt -t "$t" -X KUBE-PROXY-CANARY 2>/dev/null
  done
  $ipt -t mangle -X KUBE-IPTABLES-HINT 2>/dev/null
done
# Mounts under our directories (deepest first), then the CNI network namespaces
awk '{print $2}' /proc/mounts | grep -E "^($RK_RUN|$RK_LIB/kubelet|$RK_LIB/containerd)(/|\$)" | sort -r |
  while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
for ns in /run/netns/cni-*; do
  [ -e "$ns" ] || continue
  umount "$ns" 2>/dev/null; rm -f "$ns"
done
if grep -qx netns-mount "$S/created" 2>/dev/null && [ -z "$(ls -A /run/netns 2>/dev/null)" ] && grep -q ' /run/netns ' /proc/mounts; then
  umount /run/netns 2>/dev/null
fi
ip link show "$RK_BRIDGE" >/dev/null 2>&1 && ip link del "$RK_BRIDGE"
if [ -s "$S/sysctl.orig" ]; then
  while read -r key value; do echo "$value" >"/proc/sys/${key//.//}"; done <"$S/sysctl.orig"
fi

# --- what must be gone now
left=()
while read -r name pid; do
  if rk_ours "$pid"; then left+=("process $name (pid $pid)"); fi
done < <(cat "$S/pids" 2>/dev/null)
for p in $(pgrep -x containerd-shim-runc-v2 2>/dev/null); do
  tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$RK_RUN/" && left+=("containerd shim pid $p")
done
ip link show "$RK_BRIDGE" >/dev/null 2>&1 && left+=("interface $RK_BRIDGE")
ip -o link show 2>/dev/null | grep -q "master $RK_BRIDGE" && left+=("veth interfaces on $RK_BRIDGE")
for t in filter nat mangle; do
  chains=$(iptables -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}' | tr '\n' ' ')
  [ -n "$chains" ] && left+=("iptables $t chains: $chains")
done
mounts=$(awk '{print $2}' /proc/mounts | grep -E "^($RK_RUN|$RK_LIB|$S)(/|\$)|^/run/netns/cni-" | tr '\n' ' ')
[ -n "$mounts" ] && left+=("mounts: $mounts")
if [ -s "$S/sysctl.orig" ]; then
  while read -r key value; do
    [ "$(cat "/proc/sys/${key//.//}")" = "$value" ] || left+=("sysctl $key is not back to $value")
  done <"$S/sysctl.orig"
fi
if [ "${#left[@]}" -gt 0 ]; then
  for item in "${left[@]}"; do rk_log "left behind: $item"; done
  rk_log "down.sh could not undo everything; state kept in $S"
  exit 1
fi
# The image store too (1.5 GB): every run imports the images again from $RK_CACHE/images.
rm -rf "$S" "$RK_RUN" "$RK_LIB"
rmdir /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo /run/containerd/s /run/containerd 2>/dev/null
rk_log "stopped; nothing left behind"
exit 0
