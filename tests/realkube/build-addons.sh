#!/usr/bin/env bash
# Builds the real node's add-ons from the Go module proxy (tests/realkube/build-go.sh,
# cached by version): CoreDNS $COREDNS_VERSION, then cert-manager's controller
# and cainjector $CERT_MANAGER_VERSION. Prints the three binaries' paths, one
# per line, in that order. up.sh calls it; .ci/run runs it early, beside other
# steps, so that up.sh finds them built.
#
#   tests/realkube/build-addons.sh     (cold: ~3 min each on 2 cores)
set -euo pipefail
# shellcheck source=tests/realkube/lib.sh
source "$(dirname "$0")/lib.sh"
# CoreDNS with the plugins of kubeadm's Corefile only (coredns/main.go says why).
bash "$RK_DIR/build-go.sh" --main "$RK_DIR/coredns/main.go" coredns-kubeadm github.com/coredns/coredns "$COREDNS_VERSION" coredns ||
  rk_die "cannot build CoreDNS $COREDNS_VERSION"
bash "$RK_DIR/build-go.sh" cert-manager github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION" \
  github.com/cert-manager/cert-manager/cmd/controller github.com/cert-manager/cert-manager/cmd/cainjector ||
  rk_die "cannot build cert-manager $CERT_MANAGER_VERSION"
