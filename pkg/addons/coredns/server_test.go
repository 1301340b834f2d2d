package coredns

import (
	"net"
	"slices"
	"strings"
	"testing"
)

func TestMissing(t *testing.T) {
	all := Needs{PodNetwork: true, Proxy: true, Controllers: true, Advertise: net.ParseIP("10.244.0.1")}
	for _, tc := range []struct {
		name   string
		change func(*Needs)
		has    string
	}{
		{"everything there: DNS", func(*Needs) {}, ""},
		{"host processes", func(n *Needs) { n.PodNetwork = false }, "runc"},
		{"no kube-proxy", func(n *Needs) { n.Proxy = false }, "kube-proxy"},
		{"no controllers", func(n *Needs) { n.Controllers = false }, "controllers"},
		{"an API server on loopback", func(n *Needs) { n.Advertise = net.ParseIP("127.0.0.1") }, "--advertise-address"},
		{"on every address", func(n *Needs) { n.Advertise = net.IPv4zero }, "--advertise-address"},
		{"no address at all", func(n *Needs) { n.Advertise = nil }, "--advertise-address"},
	} {
		n := all
		tc.change(&n)
		got := Missing(n)
		if (got == "") != (tc.has == "") || !strings.Contains(got, tc.has) {
			t.Errorf("%s: %q, want one naming %q", tc.name, got, tc.has)
		}
	}
}

func TestPlanServer(t *testing.T) {
	none := t.TempDir() + "/resolv.conf"
	if err := writeFile(none, "# no nameserver\n"); err != nil {
		t.Fatal(err)
	}
	plan, note, err := PlanServer(Server{ServiceCIDR: "10.96.0.0/16", Domain: "cluster.local", ResolvConf: none,
		Advertise: net.ParseIP("10.244.0.1"), APIServerPort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Config.ServiceIP != "10.96.0.10" || plan.Config.Forward || plan.Config.APIServer != "https://10.244.0.1:6443" || plan.ResolvConf != none {
		t.Errorf("plan: %+v", plan)
	}
	if !strings.Contains(note, "will not resolve") {
		t.Errorf("a resolver file with no nameserver: note %q", note)
	}
	if args := plan.NodeArgs(); !slices.Equal(args, []string{"--cluster-dns=10.96.0.10", "--resolv-conf=" + none}) {
		t.Errorf("node args %v", args)
	}
	if _, _, err := PlanServer(Server{ServiceCIDR: "10.96.0.0/16", ResolvConf: t.TempDir() + "/missing", Advertise: net.ParseIP("10.0.0.1")}); err == nil {
		t.Error("a --resolv-conf that does not exist: no error")
	}
	if _, _, err := PlanServer(Server{ServiceCIDR: "not-a-cidr", ResolvConf: none}); err == nil {
		t.Error("a bad service range: no error")
	}
}

func TestWithServers(t *testing.T) {
	one := Config{APIServer: "https://10.0.0.1:6443", Alternatives: []string{"10.0.0.1:6443"}}
	if got := WithServers(one, []string{"10.0.0.1:6443"}); got.APIServer != one.APIServer {
		t.Errorf("one server: %+v", got)
	}
	got := WithServers(one, []string{"10.0.0.3:6443", "10.0.0.1:6443", "10.0.0.2:6443"})
	if got.APIServer != "https://10.0.0.1:6443" || !slices.Equal(got.Alternatives, []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}) {
		t.Errorf("three servers, in any order: %+v; want them sorted", got)
	}
}
