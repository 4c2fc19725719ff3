#!/usr/bin/env bash
# The end-to-end suite: cnpgi-operator against a real Kubernetes API server.
#
#   bash tests/e2e/run.sh
#
# Builds (once, cached by version) etcd, kube-apiserver and
# kube-controller-manager from the Go module proxy (tests/e2e/build-kube.sh),
# builds cnpgi-operator and the hello-world plugin, and runs tests/e2e/suite.py
# twice, each time against a fresh control plane on 127.0.0.1:
#   default   a plain API server;
#   strict    an API server with the OwnerReferencesPermissionEnforcement
#             admission plugin, and test namespaces labelled
#             pod-security.kubernetes.io/enforce=restricted.
# Prints one line per check and ends with `e2e: N passed, M failed`; exits
# non-zero when a check failed. Leaves no process behind on any exit; keeps
# the logs of a failed run (the path is printed).
#
# E2E_KUBECONFIG=FILE uses that cluster instead (no control plane is started,
# and the strict run cannot add the admission plugin). The API server must be
# able to call the operator's webhooks on 127.0.0.1 of this machine.
# Needs: Go >= 1.25 (first run), openssl, curl, python3 with PyYAML.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/lib/control-plane.sh
source tests/lib/control-plane.sh

for tool in openssl curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "e2e: $tool is required" >&2; exit 1; }
done
if ! python3 -c 'import yaml' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -r tests/e2e/requirements.txt ||
    python3 -m pip install -q --disable-pip-version-check --user --break-system-packages -r tests/e2e/requirements.txt ||
    { echo "e2e: cannot install PyYAML (tests/e2e/requirements.txt)" >&2; exit 1; }
fi

started=$(date +%s)
if [ -z "${E2E_KUBECONFIG:-}" ]; then
  bash tests/e2e/build-kube.sh >/dev/null
fi
# CNPGI_SKIP_CARGO_BUILD=1: use target/debug as it is (.ci/run builds every
# binary once; a `cargo build -p` of a few packages would resolve other
# features and recompile part of the dependencies).
if [ -z "${CNPGI_SKIP_CARGO_BUILD:-${E2E_SKIP_CARGO_BUILD:-}}" ]; then
  cargo build -q -p cnpgi-operator-cli -p cnpg-i-hello-world -p cnpgi-hooks-plugin
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-e2e.XXXXXX")"
results="$work/results"
: >"$results"

finished=0
summary() {
  local passed failed
  passed=$(grep -c '^ok' "$results" || true)
  failed=$(grep -c '^FAIL' "$results" || true)
  if [ "$finished" = 1 ]; then
    echo "e2e: $passed passed, $failed failed"
  else
    echo "e2e: interrupted after $passed passed, $failed failed"
  fi
  if [ "$finished" = 1 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]; then
    rm -rf "$work"
  else
    echo "e2e: logs kept in $work" >&2
  fi
}
CP_ON_EXIT=summary

# run_suite LABEL [--restricted] -- [extra kube-apiserver flags...]
run_suite() {
  local label="$1" restricted="" rc=0
  shift
  if [ "${1:-}" = --restricted ]; then
    restricted=--restricted
    shift
  fi
  [ "${1:-}" = -- ] && shift
  cp_start "$work/$label/control-plane" "$@"
  cp_spawn "suite-$label" - python3 tests/e2e/suite.py --label "$label" --workdir "$work/$label" \
    --results "$results" $restricted
  wait "$CP_LAST_PID" || rc=$?
  if [ "$rc" != 0 ] && ! grep -q '^FAIL' "$results"; then
    echo "FAIL $label: the suite exited $rc" | tee -a "$results"
  fi
  cp_stop
}

run_suite default
if [ -n "${E2E_KUBECONFIG:-}" ]; then
  echo "note: E2E_KUBECONFIG is set: the strict run uses restricted namespaces only (no admission plugin can be added)"
fi
run_suite strict --restricted -- --enable-admission-plugins=OwnerReferencesPermissionEnforcement
echo "e2e: took $(($(date +%s) - started)) s"
trap - EXIT INT TERM
finished=1
summary_line="$(summary)"
echo "$summary_line"
case "$summary_line" in
  *" 0 failed") exit 0 ;;
  *) exit 1 ;;
esac
