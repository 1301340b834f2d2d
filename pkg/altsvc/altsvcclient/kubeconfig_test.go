package altsvcclient

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestKubeconfigExtensionRoundTrip(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	c := &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
	if err := SetKubeconfigHosts(c, []string{"10.0.0.1:6443", "https://10.0.0.2:6443/", "10.0.0.3:6443", "10.0.0.3:6443"}); err != nil {
		t.Fatal(err)
	}
	cfg.Clusters["one"] = c
	cfg.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://192.0.2.1:6443"}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	loaded, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := HostsForServer(loaded, "https://10.0.0.1:6443")
	if want := []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("HostsForServer = %v, %v; want %v", got, err, want)
	}
	if got, err := HostsForServer(loaded, "https://192.0.2.1:6443"); err != nil || got != nil {
		t.Errorf("a cluster without the extension: %v, %v", got, err)
	}
	if got, err := HostsForServer(loaded, "10.0.0.1:6443"); err != nil || len(got) != 3 {
		t.Errorf("a server written without scheme is the same server: %v, %v", got, err)
	}
}

func TestKubeconfigExtensionBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		yaml, wantErr string
		want          []string
	}{
		"a host without a port gets 443": {`["x"]`, "", []string{"x:443"}},
		"a number":                       {`42`, "want a list of host:port", nil},
		"a bad host":                     {`["10.0.0.2:6443", "a b"]`, `alternative host "a b"`, nil},
		"hosts field":                    {`{"hosts": ["10.0.0.2:6443"]}`, "", []string{"10.0.0.2:6443"}},
	} {
		t.Run(name, func(t *testing.T) {
			doc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    extensions:
    - name: steadyplane.io/alternative-services
      extension: ` + tc.yaml + "\n"
			cfg, err := clientcmd.Load([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := HostsForServer(cfg, "https://10.0.0.1:6443")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
