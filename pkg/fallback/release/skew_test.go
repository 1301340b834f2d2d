package release

import (
	"strings"
	"testing"
)

func mustNode(t *testing.T, name string, server bool, version string) Node {
	t.Helper()
	v, err := ParseNodeVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	return Node{Name: name, Server: server, Versions: v}
}

func TestParseNodeVersion(t *testing.T) {
	tests := []struct {
		in, k8s, release, err string
	}{
		{"v1.36.3+steadyplane-v0.4.0", "1.36.3", "0.4.0", ""},
		{"v1.36.3+steadyplane-v0.5.0-rc.1", "1.36.3", "0.5.0-rc.1", ""},
		{"v1.36.3+steadyplane-v0.0.0-dev", "1.36.3", "0.0.0-dev", ""},
		{"v1.36.3+steadyplane", "", "", "names no steadyplane release"},
		{"v1.36.3", "", "", "names no steadyplane release"},
		{"v1.36+steadyplane-v0.4.0", "", "", "Kubernetes version"},
		{"v1.36.3+steadyplane-0.4", "", "", "is not a version like"},
	}
	for _, tc := range tests {
		v, err := ParseNodeVersion(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseNodeVersion(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || v.Kubernetes.String() != tc.k8s || v.Release.String() != tc.release {
			t.Errorf("ParseNodeVersion(%q) = %v, %v", tc.in, v, err)
		}
		if v.String() != tc.in {
			t.Errorf("String() = %q, want %q", v.String(), tc.in)
		}
	}
}

func TestCheckUpgrade(t *testing.T) {
	const (
		k36r4 = "v1.36.3+steadyplane-v0.4.0"
		k36r5 = "v1.36.3+steadyplane-v0.5.0"
		k37r5 = "v1.37.0+steadyplane-v0.5.0"
		k37r6 = "v1.37.0+steadyplane-v0.6.0"
		k38r6 = "v1.38.0+steadyplane-v0.6.0"
		k33r1 = "v1.33.0+steadyplane-v0.1.0"
		k32r1 = "v1.32.0+steadyplane-v0.1.0"
		k36r3 = "v1.36.3+steadyplane-v0.3.0"
	)
	type n struct {
		name    string
		server  bool
		version string
	}
	three := func(worker string) []n {
		return []n{{"s1", true, k36r4}, {"s2", true, k36r4}, {"s3", true, k36r4}, {"w1", false, worker}}
	}
	tests := []struct {
		name     string
		nodes    []n
		target   string
		rollback bool
		wantErr  []string // each must appear; none means allowed
	}{
		{"next release, same Kubernetes", three(k36r4), k36r5, false, nil},
		{"next release, next Kubernetes minor", three(k36r4), k37r5, false, nil},
		{"the same release again (a resumed roll)", three(k36r4), k36r4, false, nil},
		{"skips a Kubernetes minor", three(k36r4), k38r6, false, []string{"server s1 runs Kubernetes v1.36.3: v1.38.0 skips 1 minor", "server s3"}},
		{"skips a release minor", three(k36r4), k37r6, false, []string{"server s1 runs release v0.4.0: v0.6.0 skips 1 minor release"}},
		{"another major release", three(k36r4), "v1.36.3+steadyplane-v1.0.0", false, []string{"is another major release"}},
		{"older release without --rollback", three(k36r4), k36r3, false, []string{"v0.3.0 is older; going back is a rollback"}},
		{"rollback one release", three(k36r4), k36r3, true, nil},
		{"rollback two release minors", three(k36r4), "v1.36.3+steadyplane-v0.2.0", true, []string{"a rollback goes back one minor at most"}},
		{"agent newer than the servers", three(k37r5), k36r5, false, []string{"node w1's agent runs Kubernetes v1.37.0, newer than server s1's v1.36.3", "newer than the target v1.36.3"}},
		{"agent three minors behind the target is fine", three(k33r1), k36r5, false, nil},
		{"agent four minors behind the target", three(k32r1), k36r5, false, []string{"node w1's agent runs Kubernetes v1.32.0, 4 minors behind v1.36.3"}},
		{"agent three behind now, four after the move", three(k33r1), k37r5, false, []string{"node w1's agent runs Kubernetes v1.33.0, 4 minors behind v1.37.0"}},
		{"from a development build to a release", []n{{"s1", true, "v1.36.3+steadyplane-v0.0.0-dev"}}, k36r5, false, nil},
		{"from a release to a development build", three(k36r4), "v1.36.3+steadyplane-v0.0.0-dev", false, nil},
		{"a development build skipping a Kubernetes minor", []n{{"s1", true, "v1.36.3+steadyplane-v0.0.0-dev"}}, k38r6, false, []string{"skips 1 minor"}},
		{"the second server of a roll to the next Kubernetes minor", []n{{"s1", true, k37r5}, {"s2", true, k36r4}, {"s3", true, k36r4}, {"w1", false, k36r4}}, k37r5, false, nil},
		{"a rollback of the first server of a roll", []n{{"s1", true, k37r5}, {"s2", true, k36r4}, {"w1", false, k36r4}}, k36r4, true, nil},
		{"no server", []n{{"w1", false, k36r4}}, k36r5, false, []string{"no server found"}},
	}
	for _, tc := range tests {
		var nodes []Node
		for _, x := range tc.nodes {
			nodes = append(nodes, mustNode(t, x.name, x.server, x.version))
		}
		target, err := ParseNodeVersion(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckUpgrade(nodes, Move{Target: target, Rollback: tc.rollback})
		if len(tc.wantErr) == 0 {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: allowed, want refused with %q", tc.name, tc.wantErr)
			continue
		}
		for _, want := range tc.wantErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, want)
			}
		}
	}
}
