package podnet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

func TestMasqueradeRules(t *testing.T) {
	want := "*nat\n:STEADYPLANE-POD-MASQ - [0:0]\n" +
		"-A STEADYPLANE-POD-MASQ -d 224.0.0.0/4 -j RETURN\n" +
		"-A STEADYPLANE-POD-MASQ -j MASQUERADE\n" +
		"COMMIT\n"
	if got := string(MasqueradeRules()); got != want {
		t.Errorf("MasqueradeRules:\n%s\nwant\n%s", got, want)
	}
	if got := strings.Join(MasqueradeJump("10.244.0.0/24"), " "); !strings.HasPrefix(got, "-s 10.244.0.0/24 ! -d 10.244.0.0/24 -m comment") || !strings.HasSuffix(got, "-j STEADYPLANE-POD-MASQ") {
		t.Errorf("MasqueradeJump: %s", got)
	}
}

// Two agents' ranges on one host each keep their own jump; removing one
// (by its configuration file, as cleanup does) leaves the other.
func TestEnsureMasquerade(t *testing.T) {
	defer enterNetNS(t)() // a nat table of its own

	ipt := utiliptables.New(utiliptables.ProtocolIPv4)
	jumps := func() []string {
		t.Helper()
		out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables: %v: %s", err, out)
		}
		var js []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, string(MasqueradeChain)) {
				js = append(js, strings.Fields(l)[3]) // -A POSTROUTING -s <range> ...
			}
		}
		return js
	}
	for range 2 { // twice: nothing doubles
		for _, own := range []string{"10.251.10.0/24", "10.251.11.0/24"} {
			if err := EnsureMasquerade(ipt, own); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := strings.Join(jumps(), " "); got != "10.251.10.0/24 10.251.11.0/24" {
		t.Fatalf("jumps from POSTROUTING for %q, want one for each range", got)
	}
	conf := filepath.Join(t.TempDir(), "net.conflist")
	b, err := Conflist(Config{PodCIDR: "10.251.10.0/24", Bridge: "sp0", IPAMDir: "/r", NAT: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveMasqueradeOf(ipt, conf); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(jumps(), " "); got != "10.251.11.0/24" {
		t.Errorf("after removing 10.251.10.0/24's: jumps for %q", got)
	}
	if err := RemoveMasqueradeOf(ipt, filepath.Join(t.TempDir(), "none.conflist")); err != nil {
		t.Errorf("no configuration file: %v", err)
	}
	if err := os.WriteFile(conf, []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveMasqueradeOf(ipt, conf); err == nil {
		t.Error("a malformed configuration file was accepted")
	}
}
