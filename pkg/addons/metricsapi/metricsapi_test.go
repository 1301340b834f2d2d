package metricsapi

import (
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestObjects: the APIService is verified with the serving CA; the
// Deployment's metrics-server verifies the node agents with theirs, dials
// them at their InternalIP on their reported port, and fails over between
// the API servers through the kubeconfig; the reader role aggregates into
// view.
func TestObjects(t *testing.T) {
	c := Config{Image: "steadyplane.io/steadyplane:abc", APIServer: "https://10.0.0.1:6443", Alternatives: []string{"10.0.0.1:6443", "10.0.0.2:6443"},
		NodeCA: []byte("node CA"), ServingCA: []byte("serving CA")}
	objs, err := Objects(c)
	if err != nil {
		t.Fatal(err)
	}
	var (
		svc     *apiregistrationv1.APIService
		deploy  *appsv1.Deployment
		cm      *corev1.ConfigMap
		readers []string
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *apiregistrationv1.APIService:
			svc = o
		case *appsv1.Deployment:
			deploy = o
		case *corev1.ConfigMap:
			cm = o
		case *rbacv1.ClusterRole:
			if o.Labels["rbac.authorization.k8s.io/aggregate-to-view"] == "true" {
				readers = append(readers, o.Name)
			}
		}
	}
	if svc == nil || svc.Spec.InsecureSkipTLSVerify || string(svc.Spec.CABundle) != "serving CA" || svc.Spec.Service.Name != Name || *svc.Spec.Service.Port != 443 {
		t.Errorf("APIService: %+v; want verified with the serving CA, on Service %s port 443", svc, Name)
	}
	if !slices.Equal(readers, []string{ReaderRoleName}) {
		t.Errorf("roles aggregated into view: %v; want %s", readers, ReaderRoleName)
	}
	if deploy == nil {
		t.Fatal("no Deployment")
	}
	args := deploy.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{Name, "--kubelet-certificate-authority=" + nodeCAPath, "--kubelet-use-node-status-port", "--kubelet-preferred-address-types=InternalIP",
		"--kubeconfig=" + kubeconfigPath, "--authentication-kubeconfig=" + kubeconfigPath, "--authorization-kubeconfig=" + kubeconfigPath, "--metric-resolution=15s"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "insecure") }) {
		t.Errorf("args %v: want no insecure option", args)
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	if err != nil {
		t.Fatal(err)
	}
	if hosts, err := altsvcclient.HostsForServer(kc, c.APIServer); err != nil || !slices.Equal(hosts, c.Alternatives) {
		t.Errorf("the kubeconfig's API servers: %v, %v; want %v", hosts, err, c.Alternatives)
	}
	if cm.Data["node-ca.crt"] != "node CA" {
		t.Errorf("the node CA in the ConfigMap: %q", cm.Data["node-ca.crt"])
	}

	// Another kubeconfig rolls the pod; the same config writes the same
	// template.
	again, _ := Objects(c)
	c.Alternatives = c.Alternatives[:1]
	other, _ := Objects(c)
	hash := func(objs []any) string {
		for _, o := range objs {
			if d, ok := o.(*appsv1.Deployment); ok {
				return d.Spec.Template.Annotations["steadyplane.io/config-sha256"]
			}
		}
		return ""
	}
	if hash(objs) != hash(again) || hash(objs) == hash(other) {
		t.Errorf("template hash: %s, again %s, other servers %s; want equal, then different", hash(objs), hash(again), hash(other))
	}

	// In-cluster: no kubeconfig flags.
	inCluster := Args(Config{})
	if slices.ContainsFunc(inCluster, func(a string) bool { return strings.Contains(a, "kubeconfig") }) {
		t.Errorf("in-cluster args %v: want no kubeconfig", inCluster)
	}
}

// TestKeepSecret: the serving Secret is kept only while the cluster CA
// verifies it, it names the Service and it is not due.
func TestKeepSecret(t *testing.T) {
	now := time.Now()
	store := &pki.Store{Dir: t.TempDir()}
	ca, err := store.EnsureCA("ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := (&pki.Store{Dir: t.TempDir()}).EnsureCA("ca", "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	names := ServiceDNSNames("cluster.local")
	issue := func(ca *pki.Authority, name string, dnsNames []string) *corev1.Secret {
		kp, err := store.EnsureCert(ca, pki.CertSpec{Name: name, CommonName: Name, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: dnsNames})
		if err != nil {
			t.Fatal(err)
		}
		return ServingSecret(kp.CertPEM, kp.KeyPEM)
	}
	good := issue(ca, "good", names)
	noKey := good.DeepCopy()
	delete(noKey.Data, corev1.TLSPrivateKeyKey)
	otherKey := good.DeepCopy()
	otherKey.Data[corev1.TLSPrivateKeyKey] = issue(ca, "second", names).Data[corev1.TLSPrivateKeyKey]
	garbage := good.DeepCopy()
	garbage.Data[corev1.TLSCertKey] = []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
	for _, tc := range []struct {
		name   string
		secret *corev1.Secret
		now    time.Time
		keep   bool
		why    string
	}{
		{"none", nil, now, false, "none yet"},
		{"good", good, now, true, ""},
		{"a certificate that does not parse", garbage, now, false, "does not parse"},
		{"no key", noKey, now, false, "no key"},
		{"another certificate's key", otherKey, now, false, "key does not match"},
		{"another CA's", issue(other, "other", names), now, false, "does not verify"},
		{"a name missing", issue(ca, "short", names[:1]), now, false, "lacks the name " + names[1]},
		{"due for renewal", good, now.Add(pki.LeafValidity * 9 / 10), false, "due for renewal"},
	} {
		keep, why := KeepSecret(tc.secret, ca.Cert, names, tc.now)
		if keep != tc.keep || !strings.Contains(why, tc.why) {
			t.Errorf("%s: KeepSecret = %v, %q; want %v, %q", tc.name, keep, why, tc.keep, tc.why)
		}
	}
}

// TestWithModelNames: each definition is found by its Go path and by its
// model name, and what it references and depends on is named by model
// name, so that a spec built from a model name holds model names only.
func TestWithModelNames(t *testing.T) {
	get := func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		meta := ref("k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta")
		return map[string]openapicommon.OpenAPIDefinition{
			"k8s.io/metrics/pkg/apis/metrics/v1beta1.NodeMetrics": {
				Schema: spec.Schema{SchemaProps: spec.SchemaProps{Description: "node",
					Properties: map[string]spec.Schema{"metadata": {SchemaProps: spec.SchemaProps{Ref: meta}}}}},
				Dependencies: []string{"k8s.io/apimachinery/pkg/apis/meta/v1.ObjectMeta"}},
			"io.k8s.already.v1.Named": {},
		}
	}
	var referenced []string
	defs := withModelNames(get)(func(name string) spec.Ref {
		referenced = append(referenced, name)
		return spec.MustCreateRef("#/definitions/" + name)
	})
	for _, name := range []string{"k8s.io/metrics/pkg/apis/metrics/v1beta1.NodeMetrics", "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"} {
		def := defs[name]
		if def.Schema.Description != "node" || !slices.Equal(def.Dependencies, []string{"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}) {
			t.Errorf("definition %s: %+v", name, def)
		}
	}
	if _, ok := defs["io.k8s.already.v1.Named"]; !ok || len(defs) != 3 {
		t.Errorf("definitions %v; want both names of NodeMetrics and the model name kept as it is", slices.Sorted(maps.Keys(defs)))
	}
	if !slices.Equal(referenced, []string{"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}) {
		t.Errorf("references by %v; want the model name", referenced)
	}
}
