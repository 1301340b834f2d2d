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
