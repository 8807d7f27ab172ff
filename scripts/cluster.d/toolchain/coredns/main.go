// A CoreDNS with only the plugins the real node's Corefile uses (scripts/cluster.d/node.sh).
//
// The release's own main imports all of them, and with route53, azure and clouddns come
// the AWS, Azure and Google SDKs: minutes of compiling on a cold cache for DNS that only
// answers cluster.local. This is CoreDNS's documented way of building a custom set:
// import the plugins, list their directives in execution order, run coremain.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives keeps the relative order of the release's plugin.cfg: a plugin sees the
// effect of every plugin after it.
var directives = []string{
	"bind",
	"ready",
	"errors",
	"cache",
	"template",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
