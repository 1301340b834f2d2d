package controlplane

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestPodSecurityAdmission(t *testing.T) {
	b, err := PodSecurityAdmission("baseline")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Kind    string
		Plugins []struct {
			Name          string
			Configuration struct {
				Defaults   map[string]string
				Exemptions struct{ Namespaces []string }
			}
		}
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	p := cfg.Plugins[0]
	if cfg.Kind != "AdmissionConfiguration" || p.Name != "PodSecurity" || p.Configuration.Defaults["enforce"] != "baseline" ||
		p.Configuration.Defaults["warn"] != "restricted" || strings.Join(p.Configuration.Exemptions.Namespaces, ",") != "kube-system,steadyplane-system" {
		t.Errorf("admission configuration:\n%s", b)
	}
	if _, err := PodSecurityAdmission("strict"); err == nil {
		t.Error("an unknown level accepted")
	}
}

// TestAdmissionSource: a joined server takes the cluster's Pod Security
// unless told a level or a file, and is warned when what it is told
// differs from the cluster's.
func TestAdmissionSource(t *testing.T) {
	baseline, err := PodSecurityAdmission("baseline")
	if err != nil {
		t.Fatal(err)
	}
	restricted, err := PodSecurityAdmission("restricted")
	if err != nil {
		t.Fatal(err)
	}
	opts := func(level string, set bool, file string) Options {
		o := *NewOptions()
		o.PodSecurity, o.PodSecuritySet, o.PodSecurityConfigFile = level, set, file
		return o
	}
	for _, tc := range []struct {
		name       string
		o          Options
		cluster    []byte
		useCluster bool
		warns      bool
	}{
		{"first server, default", opts("baseline", false, ""), nil, false, false},
		{"first server, a level", opts("restricted", true, ""), nil, false, false},
		{"joined, default: the cluster's", opts("baseline", false, ""), restricted, true, false},
		{"joined, the cluster's level given", opts("restricted", true, ""), restricted, false, false},
		{"joined, another level given", opts("baseline", true, ""), restricted, false, true},
		{"joined, a file given", opts("baseline", false, "/etc/admission.yaml"), baseline, false, true},
		{"joined to an earlier release (no configuration sent)", opts("baseline", false, ""), nil, false, false},
	} {
		use, warning := admissionSource(tc.o, tc.cluster)
		if use != tc.useCluster || (warning != "") != tc.warns {
			t.Errorf("%s: cluster's %v, warning %q; want %v, a warning %v", tc.name, use, warning, tc.useCluster, tc.warns)
		}
	}
}
