#!/usr/bin/env bash
# The real-cluster tests, on kind as users run it:
#   1. what the cluster needs, built here from Debian's packages and the Go module
#      proxy, cached by version (each step is a no-op when cached):
#        tests/e2e/build-kube.sh --node, build-addons.sh, build-kind-tools.sh
#                       Kubernetes v1.34, CoreDNS, cert-manager, kind, containerd 2, ...
#        images.sh      the project's images from its Dockerfile, the DatabaseTable
#                       example's plugins in Python and Go, PostgreSQL's, moto's,
#                       MariaDB's and plugin-barman-cloud's (barman.sh) (in the
#                       tests' dockerd, tests/realkube/dockerd.sh)
#        cnpg.sh image  the real CloudNativePG's operator image
#        node-image.sh  kind's node image, every image above but the project's preloaded
#   2. up.sh       `task local-kind-deploy` with the local node image and cert-manager:
#                  the kind cluster, the operator and the hello-world plugin, the sample
#                  Cluster (the deployment guide's quick start, run as written);
#   3. the manifests as users build them (`task manifest`, CloudNativePG's
#      config/default, the plugins' kustomizations), and the scenarios against
#      the cluster's kubeconfig:
#        scenario_quick_start.py    0. what the quick start left: the sample Cluster's Pods patched
#        scenario_operator.py       1. cnpgi-operator as users install it
#        scenario_cloudnative_pg.py 2. the real CloudNativePG with the hello-world plugin
#        scenario_wal_archive.py    3. WAL archiving, a backup and a recovery through
#                                      the wal-archive plugin, on CloudNativePG
#        scenario_barman_cloud.py   3b. WAL archiving through plugin-barman-cloud (the
#                                      CloudNativePG project's plugin) to moto
#        under-cnpg                 3c. examples/wal-archive/bench/under_cnpg.py --smoke:
#                                      the bench beside plugin-barman-cloud, harness only
#        scenario_faults.py         4. faults (the sidecar SIGKILLed, the store down, the
#                                      store's volume full, the plugin's certificates
#                                      rotated, the node's runtime restarted), each
#                                      proven lossless
#        scenario_doctor.py         5. `cnpgi-operator doctor` (the operator image's binary,
#                                      also as `kubectl cnpgi`): passes on the plugin as
#                                      deployed, names each seeded misconfiguration
#        scenario_database_table.py 6. issue 33's DatabaseTable walk: the operator and its
#                                      plugins in Rust, Python and Go as Pods registering
#                                      themselves, tables on CloudNativePG's PostgreSQL and
#                                      on MariaDB, references, the implementation choice,
#                                      a plugin forgotten and back, a rogue certificate,
#                                      deletion
#   4. down.sh     on any exit: the cluster deleted, the host as it was; with
#                  RK_KEEP=1, passed or failed, the cluster is left running
#                  (its kubeconfig: $RK_STATE/kubeconfig) for
#                  examples/wal-archive/bench/under_cnpg.py; down.sh removes it.
# Each scenario prints one line per check and `N passed, M failed`; the run
# exits non-zero on any failure, including a down.sh that could not undo
# everything. Keeps the cluster's logs of a failed run (the path is printed).
#
# REALKUBE_KUBECONFIG=FILE runs the scenarios against that cluster instead
# (a kind cluster made with kind's own node image: .github/workflows/ci.yml):
# nothing is built and no cluster is started; the cluster needs
# `task local-kind-deploy` done, cert-manager, cluster DNS and a default
# StorageClass, and its nodes the images (`kind load docker-image`):
# cnpgi-operator, cnpg-i-hello-world, cnpgi-wal-archive and $RK_DBT_IMAGES tagged
# RK_IMAGE_TAG (default realkube), RK_POSTGRES_IMAGE, RK_CNPG_IMAGE, RK_MOTO_IMAGE
# RK_MARIADB_IMAGE, RK_BARMAN_IMAGE and RK_BARMAN_SIDECAR_IMAGE (lib.sh).
# RK_PREBUILT=DIR builds the project's images from the binaries in DIR (the
# Dockerfile's BUILD=prebuilt; .ci/run gives those its suites built) instead of
# compiling them in the image build.
# RK_SCENARIOS="quick-start operator cloudnative-pg doctor database-table wal-archive barman-cloud under-cnpg faults" runs
# those, in order (by default all, in three lanes side by side); faults runs
# commands on the node: RK_NODE_EXEC (default: docker exec into kind's node).
#
#   sudo bash tests/realkube/run.sh
# Needs root, Debian packages (docker.io runc iptables mmdebstrap jq gcc),
# Go >= 1.26, cargo, python3 with PyYAML and pip, task (go-task) and kustomize.
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
TAG=$RK_IMAGE_TAG
export RK_IMAGE_TAG
started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-realkube-run.XXXXXX")

# manifests: what the scenarios apply, as users build it, into $work:
#   manifest.yaml     `task manifest` (cnpgi-operator and hello-world, cnpgi-system)
#   cnpg.yaml         CloudNativePG's config/default with its image (cnpg.sh manifest)
#   hello-world.yaml  manifests/hello-world in cnpg-system, for CloudNativePG
#   wal-archive.yaml  examples/wal-archive/manifests with the image set
#   barman-cloud.yaml plugin-barman-cloud's kubernetes/ with our images (barman.sh manifest)
#   database-table.yaml, database-table-mariadb.yaml
#                     examples/database-table/manifests and its mariadb/, images set
manifests() {
  task manifest OPERATOR_IMAGE="cnpgi-operator:$TAG" PLUGIN_IMAGE="cnpg-i-hello-world:$TAG" >/dev/null ||
    rk_die "task manifest failed"
  mv manifest.yaml "$work/manifest.yaml"
  bash "$RK_DIR/cnpg.sh" manifest "$RK_CNPG_IMAGE" >"$work/cnpg.yaml" 2>"$work/cnpg-kustomize.log" ||
    { cat "$work/cnpg-kustomize.log" >&2; rk_die "cannot build CloudNativePG's manifest"; }
  cp -r "$RK_REPO/manifests/hello-world" "$work/hello-world"
  (cd "$work/hello-world" && kustomize edit set namespace cnpg-system &&
    kustomize edit set image "cnpg-i-hello-world=cnpg-i-hello-world:$TAG" && kustomize build . >"$work/hello-world.yaml") ||
    rk_die "cannot build manifests/hello-world for cnpg-system"
  cp -r "$RK_REPO/examples/wal-archive/manifests" "$work/wal-archive"
  (cd "$work/wal-archive" && kustomize edit set image "cnpgi-wal-archive=cnpgi-wal-archive:$TAG" &&
    kustomize build . >"$work/wal-archive.yaml") || rk_die "cannot build examples/wal-archive/manifests"
  bash "$RK_DIR/barman.sh" manifest >"$work/barman-cloud.yaml" 2>"$work/barman-kustomize.log" ||
    { cat "$work/barman-kustomize.log" >&2; rk_die "cannot build plugin-barman-cloud's manifest"; }
  cp -r "$RK_REPO/examples/database-table/manifests" "$work/database-table"
  (cd "$work/database-table" && kustomize edit set image "database-table-operator=database-table-operator:$TAG" \
    "database-table-postgres=database-table-postgres:$TAG" "database-table-naming=database-table-naming:$TAG" &&
    kustomize build . >"$work/database-table.yaml") || rk_die "cannot build examples/database-table/manifests"
  (cd "$work/database-table/mariadb" && kustomize edit set image "database-table-mariadb=database-table-mariadb:$TAG" &&
    kustomize build . >"$work/database-table-mariadb.yaml") || rk_die "cannot build examples/database-table/manifests/mariadb"
}

# scenario NAME KUBECONFIG: runs one scenario against the cluster.
scenario() {
  local s=$1 kubeconfig=$2 rc=0 t=$SECONDS node_exec=${RK_NODE_EXEC:-$DOCKER_BIN exec $KIND_CLUSTER-control-plane}
  case "$s" in
  quick-start)
    python3 "$RK_DIR/scenario_quick_start.py" --kubeconfig "$kubeconfig" || rc=1 ;;
  operator)
    # It cuts the network on the node (iptables), and creates $work/timed-done
    # once its plugin-arrival check is done (lanes below).
    python3 "$RK_DIR/scenario_operator.py" --kubeconfig "$kubeconfig" \
      --manifest "$work/manifest.yaml" --postgres-image "$RK_POSTGRES_IMAGE" \
      --node-exec "$node_exec" --timed-done "$work/timed-done" || rc=1 ;;
  cloudnative-pg)
    python3 "$RK_DIR/scenario_cloudnative_pg.py" --kubeconfig "$kubeconfig" --cnpg-manifest "$work/cnpg.yaml" \
      --plugin-manifest "$work/hello-world.yaml" --postgres-image "$RK_POSTGRES_IMAGE" || rc=1 ;;
  wal-archive)
    python3 "$RK_DIR/scenario_wal_archive.py" --kubeconfig "$kubeconfig" --cnpg-manifest "$work/cnpg.yaml" \
      --plugin-manifest "$work/wal-archive.yaml" --postgres-image "$RK_POSTGRES_IMAGE" \
      --moto-image "$RK_MOTO_IMAGE" || rc=1 ;;
  barman-cloud)
    python3 "$RK_DIR/scenario_barman_cloud.py" --kubeconfig "$kubeconfig" --cnpg-manifest "$work/cnpg.yaml" \
      --plugin-manifest "$work/barman-cloud.yaml" --postgres-image "$RK_POSTGRES_IMAGE" \
      --moto-image "$RK_MOTO_IMAGE" || rc=1 ;;
  under-cnpg)
    # The bench beside plugin-barman-cloud in smoke mode (BENCHMARKS.md): its own
    # namespace and moto, both plugins as wal-archive and barman-cloud left them.
    python3 "$RK_REPO/examples/wal-archive/bench/under_cnpg.py" --smoke --rows wal-archive,barman-8 \
      --kubeconfig "$kubeconfig" --postgres-image "$RK_POSTGRES_IMAGE" --moto-image "$RK_MOTO_IMAGE" || rc=1 ;;
  faults)
    # It acts on the node itself (SIGKILL to a container, restarting containerd
    # and the kubelet), the last only once the other lanes are done (below).
    python3 "$RK_DIR/scenario_faults.py" --kubeconfig "$kubeconfig" --node-exec "$node_exec" \
      --cnpg-manifest "$work/cnpg.yaml" --plugin-manifest "$work/wal-archive.yaml" \
      --postgres-image "$RK_POSTGRES_IMAGE" --moto-image "$RK_MOTO_IMAGE" \
      ${RK_FAULTS:+--faults "$RK_FAULTS"} ${RK_FAULTS_NAMESPACE:+--namespace "$RK_FAULTS_NAMESPACE"} \
      ${RK_PLUGIN_ALONE_AFTER:+--plugin-alone-after $RK_PLUGIN_ALONE_AFTER} \
      ${RK_NODE_ALONE_AFTER:+--node-alone-after $RK_NODE_ALONE_AFTER} || rc=1 ;;
  doctor)
    # The operator image's cnpgi-operator and kubectl-cnpgi, run here; else the workspace's build.
    local bin=$work/doctor-bin id
    if [ ! -x "$bin/cnpgi-operator" ] && id=$(rk_docker create "cnpgi-operator:$TAG" 2>/dev/null); then
      mkdir -p "$bin"
      rk_docker cp "$id:/usr/local/bin/." "$bin/" >/dev/null || rk_log "cannot copy cnpgi-operator out of its image"
      rk_docker rm "$id" >/dev/null || true
    fi
    [ -x "$bin/cnpgi-operator" ] || bin=$RK_REPO/target/debug
    python3 "$RK_DIR/scenario_doctor.py" --kubeconfig "$kubeconfig" --doctor "$bin/cnpgi-operator" \
      --plugin-image "cnpg-i-hello-world:$TAG" || rc=1 ;;
  database-table)
    python3 "$RK_DIR/scenario_database_table.py" --kubeconfig "$kubeconfig" --cnpg-manifest "$work/cnpg.yaml" \
      --manifest "$work/database-table.yaml" --mariadb-plugin-manifest "$work/database-table-mariadb.yaml" \
      --postgres-image "$RK_POSTGRES_IMAGE" --mariadb-image "$RK_MARIADB_IMAGE" || rc=1 ;;
  *) rk_log "unknown scenario $s"; rc=1 ;;
  esac
  rk_log "scenario $s took $(( SECONDS - t )) s"
  return "$rc"
}

# scenarios KUBECONFIG: RK_SCENARIOS in order, each run whatever the previous
# gave. By default, four lanes side by side (the scenarios mostly wait on
# PostgreSQL and the API server): A quick-start, operator, cloudnative-pg, doctor,
# database-table; B wal-archive, then barman-cloud and under-cnpg (the bench beside
# plugin-barman-cloud, smoke mode); D the faults on archiving (sidecar killed,
# store's volume full) with a Cluster and store of their own; C the other
# faults (store down, certificates rotated, node runtime restarted). B, C and
# D start once operator's plugin-arrival check is done (a plugin installed and
# used in the same second must be admitted: its Pod's start is not to be
# slowed by their PostgreSQL instances); faults rotates the wal-archive
# plugin's certificates once B and D are done (CloudNativePG's calls to the
# plugin fail until the plugin's Pod sees its new Secrets, and under-cnpg
# archives through it), and restarts the node's runtime once A, B and D are
# done. barman-cloud and under-cnpg follow wal-archive in B, which makes B the
# longest lane (warm run at 0accce5, scenario times: A about 300 s after
# operator's check, B 194 + 99 + 176 s, D 339 s), so the rotation now waits
# for B. D used to follow B in one lane: the rotation, then the restart,
# waited for both (719 s for C in a warm run).
# Each lane's output is printed when it ends.
scenarios() {
  local kubeconfig=$1 rc=0 s lane_a lane_b lane_d
  if [ -n "${RK_SCENARIOS:-}" ]; then
    for s in $RK_SCENARIOS; do scenario "$s" "$kubeconfig" || rc=1; done
    return "$rc"
  fi
  ( rc=0; for s in quick-start operator cloudnative-pg doctor database-table; do scenario "$s" "$kubeconfig" || rc=1; done
    touch "$work/lane-a.done"; exit "$rc" ) >"$work/lane-a.log" 2>&1 &
  lane_a=$!
  after_timed() {
    while [ ! -e "$work/timed-done" ] && kill -0 "$lane_a" 2>/dev/null; do sleep 1; done
  }
  ( after_timed; rc=0; scenario wal-archive "$kubeconfig" || rc=1
    scenario barman-cloud "$kubeconfig" || rc=1; scenario under-cnpg "$kubeconfig" || rc=1
    touch "$work/lane-b.done"; exit "$rc" ) >"$work/lane-b.log" 2>&1 &
  lane_b=$!
  ( after_timed; rc=0
    RK_FAULTS=sidecar,volume-full RK_FAULTS_NAMESPACE=realkube-faults-archiving scenario faults "$kubeconfig" || rc=1
    touch "$work/lane-d.done"; exit "$rc" ) >"$work/lane-d.log" 2>&1 &
  lane_d=$!
  ( after_timed; RK_FAULTS=store-down,certificates,runtime \
      RK_PLUGIN_ALONE_AFTER="$work/lane-b.done $work/lane-d.done" \
      RK_NODE_ALONE_AFTER="$work/lane-a.done $work/lane-b.done $work/lane-d.done" \
      scenario faults "$kubeconfig" ) >"$work/lane-c.log" 2>&1 || rc=1
  wait "$lane_a" || rc=1
  wait "$lane_b" || rc=1
  wait "$lane_d" || rc=1
  cat "$work/lane-a.log" "$work/lane-b.log" "$work/lane-d.log" "$work/lane-c.log"
  return "$rc"
}

if [ -n "${REALKUBE_KUBECONFIG:-}" ]; then
  [ -r "$REALKUBE_KUBECONFIG" ] || rk_die "REALKUBE_KUBECONFIG=$REALKUBE_KUBECONFIG is not readable"
  trap 'rm -rf "$work"' EXIT
  manifests
  rc=0
  KUBECTL="${KUBECTL:-kubectl}" scenarios "$REALKUBE_KUBECONFIG" || rc=$?
  rk_log "$([ "$rc" = 0 ] && echo passed || echo failed) in $(( $(date +%s) - started )) s"
  exit "$rc"
fi

[ "$(id -u)" = 0 ] || rk_die "run.sh needs root (dockerd, kind's privileged node, mmdebstrap)"
finish() {
  local code=$? down=0
  trap - EXIT
  if [ "$code" != 0 ] && rk_docker version >/dev/null 2>&1 &&
    PATH=$(rk_tools_path) kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
    PATH=$(rk_tools_path) kind export logs --name "$KIND_CLUSTER" "$work/cluster" >/dev/null 2>&1 || true
  fi
  if [ "${RK_KEEP:-0}" = 1 ]; then
    if [ "$code" = 0 ]; then rm -rf "$work"; rk_log "passed in $(( $(date +%s) - started )) s"
    else rk_log "failed (exit $code); logs kept in $work"; fi
    rk_log "the cluster is kept (RK_KEEP=1): KUBECONFIG=$RK_KUBECONFIG, kubectl $(rk_kubectl_bin);" \
      "bash $RK_DIR/down.sh removes it"
    exit "$code"
  fi
  bash "$RK_DIR/down.sh" || down=1
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

built=$(date +%s)
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  bash "$RK_REPO/tests/e2e/build-kube.sh" --node >/dev/null || rk_die "cannot build the Kubernetes binaries"
  bash "$RK_DIR/build-addons.sh" >/dev/null || rk_die "cannot build the add-ons (CoreDNS, cert-manager)"
  bash "$RK_DIR/build-kind-tools.sh" || rk_die "cannot build kind and its node's tools"
fi
bash "$RK_DIR/dockerd.sh" start || rk_die "cannot start the tests' dockerd"
bash "$RK_DIR/images.sh" || rk_die "building the images failed"
if [ "$RK_UPSTREAM_IMAGES" = 0 ]; then
  bash "$RK_DIR/cnpg.sh" image >/dev/null || rk_die "building CloudNativePG's image failed"
  bash "$RK_DIR/node-image.sh" || rk_die "building kind's node image failed"
fi
# The images a rebuild left without a name. Here, not in images.sh or
# node-image.sh: CI runs those two side by side on this dockerd, and one's
# prune would remove the other's image between its build and its tag.
rk_docker image prune -f >/dev/null 2>&1 || true
rk_log "images ready in $(( $(date +%s) - built )) s"
bash "$RK_DIR/up.sh" || rk_die "task local-kind-deploy did not bring the cluster up"
manifests
KUBECTL="$(rk_kubectl_bin)" scenarios "$RK_KUBECONFIG"
