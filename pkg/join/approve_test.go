package join

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// csrOf is a request by user (in groups) for a certificate of template
// with usages.
func csrOf(t *testing.T, user string, groups []string, template *x509.CertificateRequest, usages ...certificatesv1.KeyUsage) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, template, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), Username: user, Groups: groups, Usages: usages}}
}

func nodeSubject(name string) *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + name, Organization: []string{"system:nodes"}}}
}

func TestDecideNodeClient(t *testing.T) {
	token := []string{"system:bootstrappers", JoinGroup, "system:authenticated"}
	node := []string{"system:nodes", "system:authenticated"}
	client := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	withSAN := nodeSubject("w4")
	withSAN.DNSNames = []string{"w4"}
	admin := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}}
	for _, tc := range []struct {
		name       string
		csr        *certificatesv1.CertificateSigningRequest
		nodeExists bool
		want       Verdict
	}{
		{"a token joins a new node", csrOf(t, "system:bootstrap:abcdef", token, nodeSubject("w4"), client...), false, Approve},
		{"a token asks for an existing node", csrOf(t, "system:bootstrap:abcdef", token, nodeSubject("steadyplane"), client...), true, Deny},
		{"a node renews its own", csrOf(t, "system:node:w4", node, nodeSubject("w4"), client...), true, Approve},
		{"a node taken out renews", csrOf(t, "system:node:w4", node, nodeSubject("w4"), client...), false, Deny},
		{"a node asks for another node's", csrOf(t, "system:node:w4", node, nodeSubject("steadyplane"), client...), true, Wait},
		{"a bootstrap token not of the join group", csrOf(t, "system:bootstrap:abcdef", []string{"system:bootstrappers"}, nodeSubject("w4"), client...), false, Wait},
		{"not a node's subject", csrOf(t, "system:bootstrap:abcdef", token, admin, client...), false, Deny},
		{"a node's name without its group", csrOf(t, "system:bootstrap:abcdef", token, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:w4"}}, client...), false, Deny},
		{"server auth usage", csrOf(t, "system:bootstrap:abcdef", token, nodeSubject("w4"), certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth), false, Deny},
		{"no client auth", csrOf(t, "system:bootstrap:abcdef", token, nodeSubject("w4"), certificatesv1.UsageDigitalSignature), false, Deny},
		{"a host name in it", csrOf(t, "system:bootstrap:abcdef", token, withSAN, client...), false, Deny},
		{"garbage", &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: []byte("no"), Username: "system:bootstrap:abcdef", Groups: token}}, false, Deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := DecideNodeClient(tc.csr, tc.nodeExists)
			if got != tc.want || why == "" {
				t.Errorf("DecideNodeClient = %s (%q), want %s with a reason", got, why, tc.want)
			}
		})
	}
}

func TestDecideServing(t *testing.T) {
	serving := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	node := []string{"system:nodes"}
	own := nodeSubject("w4")
	own.DNSNames, own.IPAddresses = []string{"w4"}, []net.IP{net.ParseIP("10.0.0.4")}
	otherName := nodeSubject("w4")
	otherName.DNSNames = []string{"kubernetes.default"}
	w4 := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.4"}}}}
	elsewhere := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}}}}
	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		node *corev1.Node
		want Verdict
	}{
		{"its own name and address", csrOf(t, "system:node:w4", node, own, serving...), w4, Approve},
		{"not registered yet", csrOf(t, "system:node:w4", node, own, serving...), nil, Wait},
		{"an address its Node does not show", csrOf(t, "system:node:w4", node, own, serving...), elsewhere, Wait},
		{"another name", csrOf(t, "system:node:w4", node, otherName, serving...), w4, Deny},
		{"asked by a token", csrOf(t, "system:bootstrap:abcdef", []string{JoinGroup}, own, serving...), w4, Deny},
		{"client auth usage", csrOf(t, "system:node:w4", node, own, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth), w4, Deny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := DecideServing(tc.csr, tc.node); got != tc.want {
				t.Errorf("DecideServing = %s (%q), want %s", got, why, tc.want)
			}
		})
	}
}
