#!/usr/bin/env bash
# The real-node tests of issue 25, on this machine:
#   1. images.sh   the project's images from its Dockerfile (docker build), and
#                  a PostgreSQL 15 image from Debian's packages;
#   2. up.sh       a one-node Kubernetes v1.34 (containerd, kubelet, CoreDNS,
#                  cert-manager), then the images loaded into its containerd;
#   3. `task manifest` with those images, and scenario_operator.py against the
#      cluster's kubeconfig (scenario 1: cnpgi-operator as users install it);
#   4. down.sh     on any exit: nothing left running or configured.
# Prints one line per check and `N passed, M failed`; exits non-zero on any
# failure, including a down.sh that could not undo everything. Keeps the
# cluster's logs of a failed run (the path is printed).
#
# REALKUBE_KUBECONFIG=FILE runs the scenario against that cluster instead
# (kind, for instance): no image is built and no node is started; the cluster
# needs cert-manager and cluster DNS, and its nodes the images named by
# RK_IMAGE_TAG (default realkube) and RK_POSTGRES_IMAGE (`kind load docker-image`).
#
#   sudo bash tests/realkube/run.sh
# Needs root, Debian packages (containerd runc docker.io iptables conntrack
# containernetworking-plugins debootstrap), Go >= 1.25, cargo, python3 with
# PyYAML, task (go-task) and kustomize.
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$RK_REPO"
for tool in task kustomize python3; do
  command -v "$tool" >/dev/null || rk_die "$tool is required (pip install go-task-bin; go install sigs.k8s.io/kustomize/kustomize/v5@v5.6.0)"
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -r tests/e2e/requirements.txt ||
    rk_die "python3 needs PyYAML: pip install -r tests/e2e/requirements.txt failed"
fi
TAG=${RK_IMAGE_TAG:-realkube}
export RK_IMAGE_TAG=$TAG
started=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-realkube-run.XXXXXX")
if [ -n "${REALKUBE_KUBECONFIG:-}" ]; then
  [ -r "$REALKUBE_KUBECONFIG" ] || rk_die "REALKUBE_KUBECONFIG=$REALKUBE_KUBECONFIG is not readable"
  task manifest OPERATOR_IMAGE="cnpgi-operator:$TAG" PLUGIN_IMAGE="cnpg-i-hello-world:$TAG" >/dev/null ||
    rk_die "task manifest failed"
  mv manifest.yaml "$work/manifest.yaml"
  rc=0
  KUBECTL="${KUBECTL:-kubectl}" python3 "$RK_DIR/scenario_operator.py" --kubeconfig "$REALKUBE_KUBECONFIG" \
    --manifest "$work/manifest.yaml" --postgres-image "$RK_POSTGRES_IMAGE" || rc=$?
  rm -rf "$work"
  exit "$rc"
fi

images_started=$(date +%s)
mapfile -t tars < <(bash "$RK_DIR/images.sh") || rk_die "building the images failed"
[ "${#tars[@]}" = 3 ] || rk_die "images.sh printed ${#tars[@]} archives, not 3"
rk_log "images ready in $(( $(date +%s) - images_started )) s"

cluster_up=0
finish() {
  local code=$? down=0
  trap - EXIT
  if [ "$cluster_up" = 1 ] || [ -e "$RK_STATE/pids" ]; then
    if [ "$code" != 0 ] && [ -d "$RK_STATE" ]; then
      mkdir -p "$work/cluster"
      cp "$RK_STATE"/*.log "$work/cluster/" 2>/dev/null || true
      cp -r "$RK_LIB/pod-logs" "$work/cluster/" 2>/dev/null || true
    fi
    bash "$RK_DIR/down.sh" || down=1
  fi
  if [ "$down" = 1 ]; then
    rk_log "FAIL: down.sh left something behind (listed above)"
    [ "$code" = 0 ] && code=1
  fi
  if [ "$code" = 0 ]; then
    rm -rf "$work"
    rk_log "passed in $(( $(date +%s) - started )) s"
  else
    rk_log "failed (exit $code); logs kept in $work"
  fi
  exit "$code"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cluster_up=1
bash "$RK_DIR/up.sh" >/dev/null || rk_die "the cluster did not start"
rk_import "${tars[@]}"
rk_log "images loaded into the node"

task manifest OPERATOR_IMAGE="cnpgi-operator:$TAG" PLUGIN_IMAGE="cnpg-i-hello-world:$TAG" >/dev/null ||
  rk_die "task manifest failed"
mv manifest.yaml "$work/manifest.yaml"

KUBECTL="$(rk_kubectl_bin)" python3 "$RK_DIR/scenario_operator.py" --kubeconfig "$RK_KUBECONFIG" \
  --manifest "$work/manifest.yaml" --postgres-image "$RK_POSTGRES_IMAGE"
