#!/usr/bin/env bash
# Brings up the tests' Kubernetes as users do: `task local-kind-deploy` (the
# quick start of book/src/guides/deploy.md), with the local values this machine
# needs and nothing else:
#   KIND_NODE_IMAGE        $RK_KIND_NODE_IMAGE (tests/realkube/node-image.sh), not
#                          Docker Hub's kindest/node (RK_UPSTREAM_IMAGES=1: kind's own,
#                          and cert-manager's release manifest)
#   CERT_MANAGER_MANIFEST  cert-manager $CERT_MANAGER_VERSION made here
#                          ($RK_STATE/cert-manager.yaml: the module's CRDs and
#                          addons/cert-manager.yaml), not the GitHub release
#   OPERATOR_IMAGE, PLUGIN_IMAGE, BINS, CARGO_PROFILE, DOCKER_BUILD_ARGS, PREBUILT
#                          the images as images.sh built them (the task's
#                          build is BuildKit's cache; dev profile, as tests
#                          build, or the binaries of RK_PREBUILT)
#   POSTGRES_IMAGE         $RK_POSTGRES_IMAGE for the sample Clusters (no registry
#                          serves the operators' default PostgreSQL images here)
# The task makes the kind cluster, installs cert-manager, builds and loads the
# images, deploys the operator and the hello-world plugin and applies the sample
# Cluster. Then `task cnpg-kind-deploy` (CloudNativePG's own flow, with
# CNPG_MANIFEST its config/default built here: cnpg.sh manifest) installs the
# real CloudNativePG, registers the plugin with it and applies its sample
# Cluster. Last, the wal-archive image and the DatabaseTable example's
# ($RK_DBT_IMAGES) are loaded too (`kind load docker-image`).
# KUBECONFIG is $RK_KUBECONFIG: the user's ~/.kube/config is not touched.
#
#   tests/realkube/up.sh          # root; images.sh and node-image.sh first
#   tests/realkube/down.sh        # undoes all of it, failure included
#
# It first records what kind's privileged node may change on the host (the
# global kernel settings, /lib/modules, iptables), which down.sh puts back and checks.
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/lib/go-env.sh
source "$(dirname "$0")/../lib/go-env.sh"
[ "$(id -u)" = 0 ] || rk_die "up.sh needs root (dockerd, kind's privileged node)"
for tool in task kustomize python3; do
  command -v "$tool" >/dev/null || rk_die "$tool is required (pip install go-task-bin; go install sigs.k8s.io/kustomize/kustomize/v5@v5.6.0)"
done
export PATH KUBECONFIG=$RK_KUBECONFIG
PATH=$(rk_tools_path)
for b in kind kubectl docker; do
  command -v "$b" >/dev/null || rk_die "missing $b (tests/realkube/build-kind-tools.sh, tests/e2e/build-kube.sh --node)"
done

mkdir -p "$RK_STATE"
bash "$RK_DIR/dockerd.sh" start
if [ -n "$RK_KIND_NODE_IMAGE" ]; then
  rk_docker image inspect "$RK_KIND_NODE_IMAGE" >/dev/null 2>&1 || rk_die "no $RK_KIND_NODE_IMAGE (tests/realkube/node-image.sh)"
fi

# --- what kind's node may change on the host, recorded before it starts: the
# kubelet writes kernel.panic, kernel.panic_on_oops and vm.overcommit_memory,
# systemd fs.file-max, kube-proxy nf_conntrack_max; kind bind-mounts /lib/modules
# (created when missing).
snapshot() {
  find /proc/sys/kernel /proc/sys/vm /proc/sys/fs /proc/sys/net/netfilter -type f -perm -u+w 2>/dev/null |
    grep -v -e '^/proc/sys/kernel/ns_last_pid$' -e '^/proc/sys/kernel/random/' | LC_ALL=C sort |
    while read -r f; do v=$( { tr '\n\t' '  ' <"$f"; } 2>/dev/null) && printf '%s\t%s\n' "$f" "$v"; done
}
if [ ! -s "$RK_STATE/sysctl.before" ]; then snapshot >"$RK_STATE/sysctl.before"; fi
if [ ! -e /lib/modules ] && [ ! -e "$RK_STATE/made-lib-modules" ]; then touch "$RK_STATE/made-lib-modules"; fi
if [ ! -e "$RK_STATE/iptables.before" ] && command -v iptables-save >/dev/null; then
  iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' >"$RK_STATE/iptables.before" || true
fi

# --- cert-manager as a local manifest: its module's CRDs (the Helm template
# lines removed) and the controller and cainjector of addons/cert-manager.yaml.
# With the upstream images, the task's default: the release manifest.
cert_manager_manifest() {
  local module_dir
  module_dir=$(cd "$RK_STATE" && go mod download -json \
    "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$module_dir/deploy/crds" ] || rk_die "no deploy/crds in github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION"
  python3 - "$module_dir/deploy/crds" <<'PY' || return 1
import glob, re, sys, yaml
for path in sorted(glob.glob(sys.argv[1] + "/crd-*.yaml")):
    text = "".join(l for l in open(path) if not re.match(r"\s*#.*\{\{", l))
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        # the chart's labels and keep-annotation are Helm templates
        doc["metadata"].pop("labels", None)
        doc["metadata"].pop("annotations", None)
        print("---")
        print(yaml.safe_dump(doc, sort_keys=False))
PY
  echo "---"
  sed -e "s|@CONTROLLER_IMAGE@|$RK_CM_CONTROLLER_IMAGE|g" -e "s|@CAINJECTOR_IMAGE@|$RK_CM_CAINJECTOR_IMAGE|g" \
    "$RK_DIR/addons/cert-manager.yaml"
}
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  cert_manager_manifest >"$RK_STATE/cert-manager.yaml" || rk_die "cannot write $RK_STATE/cert-manager.yaml"
fi

# --- the user's path
rust_minor=$(rustc --version | awk '{print $2}'); rust_minor=${rust_minor%.*}
bash "$RK_DIR/cnpg.sh" manifest "$RK_CNPG_IMAGE" >"$RK_STATE/cnpg.yaml" 2>"$RK_STATE/cnpg-kustomize.log" ||
  { cat "$RK_STATE/cnpg-kustomize.log" >&2; rk_die "cannot build CloudNativePG's manifest"; }
# task TASK: runs it in the repository with the local values; its output in $RK_STATE/TASK.log
task_() {
  local started=$SECONDS
  local local_values=()
  if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
    local_values=(KIND_NODE_IMAGE="$RK_KIND_NODE_IMAGE" CERT_MANAGER_MANIFEST="$RK_STATE/cert-manager.yaml"
      DOCKER_BUILD_ARGS="--build-arg RUST_VERSION=$rust_minor")
  fi
  (cd "$RK_REPO" && task "$1" KIND_CLUSTER="$KIND_CLUSTER" CNPG_MANIFEST="$RK_STATE/cnpg.yaml" \
    OPERATOR_IMAGE="cnpgi-operator:$RK_IMAGE_TAG" PLUGIN_IMAGE="cnpg-i-hello-world:$RK_IMAGE_TAG" \
    POSTGRES_IMAGE="$RK_POSTGRES_IMAGE" BINS="$RK_BINS" CARGO_PROFILE="$RK_CARGO_PROFILE" PREBUILT="$RK_PREBUILT" \
    "${local_values[@]}") >"$RK_STATE/$1.log" 2>&1 ||
    { tail -n 40 "$RK_STATE/$1.log" >&2; rk_die "task $1 failed (log: $RK_STATE/$1.log)"; }
  rk_log "task $1 took $(( SECONDS - started )) s"
}
task_ local-kind-deploy
task_ cnpg-kind-deploy
images=()
for image in cnpgi-wal-archive $RK_DBT_IMAGES; do images+=("$image:$RK_IMAGE_TAG"); done
kind load docker-image --name "$KIND_CLUSTER" "${images[@]}" >/dev/null ||
  rk_die "kind load docker-image ${images[*]} failed"
