// CoreDNS with the plugins of kubeadm's Corefile and nothing else: the kind
// node's cluster DNS, built by tests/realkube/build-addons.sh.
//
// CoreDNS's own main imports every plugin of its plugin.cfg, the cloud
// providers' too (Route 53, Azure, Cloud DNS) with their SDKs: from an empty
// build cache, v1.12.4 took 201 CPU seconds and made a 75 MB binary, this one
// 152 and 54 MB (2 cores, modules downloaded). This is CoreDNS's documented
// way to choose plugins at build time: import them, set dnsserver.Directives.
// kubeadm v1.34's Corefile uses errors, health, ready, kubernetes,
// prometheus, forward, cache, loop, reload and loadbalance; log and hosts
// are here for whoever edits the Corefile while debugging.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// In plugin.cfg's order, which is the order a query goes through them.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"hosts",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
