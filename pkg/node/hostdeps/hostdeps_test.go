package hostdeps

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func probe(have ...string) Probe {
	found := func(name string) error {
		if slices.Contains(have, name) {
			return nil
		}
		return errors.New("not found")
	}
	return Probe{
		LookPath:   func(name string) (string, error) { return "/usr/bin/" + name, found(name) },
		FindPlugin: found,
	}
}

func TestMissingAndPlan(t *testing.T) {
	all := []string{"runc", "conmon", "iptables", "nft", "bridge", "host-local", "loopback", "portmap"}
	tests := []struct {
		name       string
		have       []string
		root, apt  bool
		install    []string
		errHas     string
		wantErrNil bool
	}{
		{name: "everything there: nothing to do", have: all, root: true, apt: true, wantErrNil: true},
		{name: "a fresh Debian machine as root: install the five packages", have: nil, root: true, apt: true,
			install: []string{"runc", "conmon", "containernetworking-plugins", "iptables", "nftables"}, wantErrNil: true},
		{name: "only a CNI plugin missing: its package once", have: []string{"runc", "conmon", "iptables", "nft", "bridge", "loopback"}, root: true, apt: true,
			install: []string{"containernetworking-plugins"}, wantErrNil: true},
		{name: "not root: stop with the exact command", have: nil, root: false, apt: true,
			errHas: "sudo apt-get update && apt-get install -y runc conmon containernetworking-plugins iptables nftables"},
		{name: "only conmon missing (runc installed by hand): conmon", have: []string{"runc", "iptables", "nft", "bridge", "host-local", "loopback", "portmap"}, root: true, apt: true,
			install: []string{"conmon"}, wantErrNil: true},
		{name: "no apt-get: stop saying what to install and where", have: []string{"runc"}, root: true, apt: false,
			errHas: "/usr/lib/cni"},
		{name: "only nft missing, no apt-get: done without (kube-proxy's iptables mode)", have: []string{"runc", "conmon", "iptables", "bridge", "host-local", "loopback", "portmap"}, root: true, apt: false,
			wantErrNil: true},
		{name: "only nft missing, as root with apt-get: installed", have: []string{"runc", "conmon", "iptables", "bridge", "host-local", "loopback", "portmap"}, root: true, apt: true,
			install: []string{"nftables"}, wantErrNil: true},
	}
	for _, tc := range tests {
		install, err := Plan(Missing(probe(tc.have...)), tc.root, tc.apt)
		if !slices.Equal(install, tc.install) || (err == nil) != tc.wantErrNil || err != nil && !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: install %v, err %v; want %v, error containing %q", tc.name, install, err, tc.install, tc.errHas)
		}
		if err != nil && !strings.Contains(err.Error(), "--runtime=process") {
			t.Errorf("%s: the error does not name --runtime=process: %v", tc.name, err)
		}
	}
}
