package coredns

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
)

func TestServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/16": "10.96.0.10", "10.97.0.0/24": "10.97.0.10", "fd00::/108": "fd00::a"} {
		if ip, err := ServiceIP(cidr); err != nil || ip.String() != want {
			t.Errorf("ServiceIP(%s) = %v, %v; want %s", cidr, ip, err, want)
		}
	}
	if _, err := ServiceIP("10.96.0.0"); err == nil {
		t.Error("a range without a mask: want an error")
	}
}

func TestHasNameserver(t *testing.T) {
	for _, tc := range []struct {
		file string
		want bool
	}{
		{"nameserver 192.0.2.53\n", true},
		{"# comment\nsearch lab\nnameserver 10.0.0.2\n", true},
		{"nameserver 127.0.0.53\noptions edns0\n", false}, // systemd-resolved's stub
		{"nameserver ::1\n", false},
		{"nameserver 127.0.0.53\nnameserver 192.0.2.1\n", true},
		{"", false},
		{"nameserver\n", false},
		{"nameserver not-an-ip\n", false},
	} {
		if got := HasNameserver([]byte(tc.file)); got != tc.want {
			t.Errorf("HasNameserver(%q) = %v, want %v", tc.file, got, tc.want)
		}
	}
}

func TestCorefile(t *testing.T) {
	base := Config{Domain: "cluster.local"}
	for _, tc := range []struct {
		name        string
		c           Config
		has, hasNot []string
	}{
		{"forwarding: loop detection and the node's resolvers", Config{Domain: "cluster.local", Forward: true},
			[]string{"kubernetes cluster.local in-addr.arpa ip6.arpa {", "loop\n", "forward . /etc/resolv.conf", "ready\n", "health {", "prometheus :9153"}, []string{"kubeconfig"}},
		{"no resolvers: nothing forwarded off the machine", base, []string{"kubernetes cluster.local"}, []string{"forward", "loop"}},
		{"an API server to fail over from: the kubeconfig", Config{Domain: "example.internal", APIServer: "https://10.244.0.1:6443"},
			[]string{"kubernetes example.internal in-addr.arpa ip6.arpa {\n        kubeconfig /etc/coredns/kubeconfig steadyplane\n"}, nil},
	} {
		got := Corefile(tc.c)
		for _, w := range tc.has {
			if !strings.Contains(got, w) {
				t.Errorf("%s: Corefile lacks %q:\n%s", tc.name, w, got)
			}
		}
		for _, w := range tc.hasNot {
			if strings.Contains(got, w) {
				t.Errorf("%s: Corefile has %q:\n%s", tc.name, w, got)
			}
		}
	}
}

// TestKubeconfig: CoreDNS's kubeconfig loads with client-go: the service
// account's token file and CA, the servers listed, the auth provider.
func TestKubeconfig(t *testing.T) {
	kc, err := Kubeconfig(Config{APIServer: "https://10.244.0.1:6443", Alternatives: []string{"10.244.0.1:6443", "10.0.0.2:6443"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		t.Fatalf("no current context:\n%s", kc)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	if user.TokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" || user.AuthProvider == nil || user.AuthProvider.Name != altsvcclient.AuthProviderName ||
		user.AuthProvider.Config[altsvcclient.AuthProviderKubeconfig] != "/etc/coredns/kubeconfig" {
		t.Errorf("user %+v", user)
	}
	hosts, err := altsvcclient.HostsForServer(cfg, "https://10.244.0.1:6443")
	if err != nil || strings.Join(hosts, ",") != "10.244.0.1:6443,10.0.0.2:6443" {
		t.Errorf("alternatives %v, %v", hosts, err)
	}
	if c := cfg.Clusters[ctx.Cluster]; c.CertificateAuthority != "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" {
		t.Errorf("cluster CA %q", c.CertificateAuthority)
	}
}

func TestObjects(t *testing.T) {
	c := Config{Domain: "cluster.local", ServiceIP: "10.96.0.10", Image: "steadyplane.io/steadyplane:abc", APIServer: "https://10.244.0.1:6443", Alternatives: []string{"10.244.0.1:6443"}}
	objs, err := Objects(c)
	if err != nil {
		t.Fatal(err)
	}
	var deploy *appsv1.Deployment
	var svc *corev1.Service
	var cm *corev1.ConfigMap
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			deploy = o
		case *corev1.Service:
			svc = o
		case *corev1.ConfigMap:
			cm = o
		}
	}
	if deploy == nil || svc == nil || cm == nil {
		t.Fatalf("objects %v", objs)
	}
	pod := deploy.Spec.Template.Spec
	ctr := pod.Containers[0]
	if ctr.Image != c.Image || ctr.ImagePullPolicy != corev1.PullNever || pod.DNSPolicy != corev1.DNSDefault || pod.ServiceAccountName != Name ||
		ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/ready" || *ctr.SecurityContext.ReadOnlyRootFilesystem != true {
		t.Errorf("CoreDNS pod %+v", pod)
	}
	if svc.Annotations[DomainAnnotation] != "cluster.local" {
		t.Errorf("the Service does not name the cluster's domain for workers: %v", svc.Annotations)
	}
	if svc.Spec.ClusterIP != "10.96.0.10" || svc.Name != ServiceName || svc.Spec.Selector["k8s-app"] != AppLabel || deploy.Spec.Template.Labels["k8s-app"] != AppLabel {
		t.Errorf("Service %+v", svc.Spec)
	}
	if cm.Data["kubeconfig"] == "" || !strings.Contains(cm.Data["Corefile"], "kubeconfig /etc/coredns/kubeconfig") {
		t.Errorf("ConfigMap %v", cm.Data)
	}
	// A new Corefile rolls the pods: their template changes with it.
	c.Forward = true
	again, _ := Objects(c)
	if again[4].(*appsv1.Deployment).Spec.Template.Annotations["steadyplane.io/corefile-sha256"] == deploy.Spec.Template.Annotations["steadyplane.io/corefile-sha256"] {
		t.Error("the pod template does not change with the Corefile")
	}
}
