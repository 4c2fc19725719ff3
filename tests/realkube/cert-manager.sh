#!/usr/bin/env bash
# Installs cert-manager in the running tests/realkube cluster, as the cluster
# add-on that the project's manifests need (its Issuers and Certificates are
# applied as shipped, and its cainjector fills the webhooks' caBundle):
#   CRDs from the github.com/cert-manager/cert-manager module's deploy/crds
#   (the Helm template lines removed), the controller and the cainjector built
#   from that module (tests/realkube/build-go.sh) and run as Deployments in the
#   cert-manager namespace, with only the controllers self-signed and CA
#   issuers need. cert-manager's own admission webhook is not run: it only
#   validates and defaults cert-manager's resources.
#
#   tests/realkube/cert-manager.sh install
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
[ "${1:-}" = install ] || rk_die "usage: cert-manager.sh install"

module_dir=$(cd "$(mktemp -d)" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json \
  "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$module_dir/deploy/crds" ] || rk_die "no deploy/crds in github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION"
python3 - "$module_dir/deploy/crds" <<'PY' | rk_kubectl apply --server-side -f - >/dev/null || rk_die "cannot apply cert-manager's CRDs"
import glob, re, sys, yaml
for path in sorted(glob.glob(sys.argv[1] + "/crd-*.yaml")):
    text = "".join(l for l in open(path) if not re.match(r"\s*#.*\{\{", l))
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        # The chart's labels and keep-annotation are Helm templates
        doc["metadata"].pop("labels", None)
        doc["metadata"].pop("annotations", None)
        print("---")
        print(yaml.safe_dump(doc, sort_keys=False))
PY
rk_kubectl wait --for condition=Established --timeout=60s \
  crd/certificates.cert-manager.io crd/issuers.cert-manager.io crd/certificaterequests.cert-manager.io >/dev/null ||
  rk_die "cert-manager's CRDs are not Established"

sed -e "s|@CONTROLLER_IMAGE@|$RK_CM_CONTROLLER_IMAGE|g" -e "s|@CAINJECTOR_IMAGE@|$RK_CM_CAINJECTOR_IMAGE|g" \
  "$RK_DIR/addons/cert-manager.yaml" | rk_kubectl apply -f - >/dev/null || rk_die "cannot apply tests/realkube/addons/cert-manager.yaml"
for d in cert-manager cert-manager-cainjector; do
  rk_kubectl -n cert-manager rollout status "deployment/$d" --timeout=120s >&2 ||
    rk_die "cert-manager's $d did not become available (kubectl -n cert-manager logs deployment/$d)"
done
