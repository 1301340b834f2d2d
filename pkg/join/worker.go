package join

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/client-go/util/retry"

	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Worker is a node that joins a cluster to run pods: it gets its
// credentials by certificate signing requests, as the kubelet's TLS
// bootstrapping does, and holds no key of the cluster's.
type Worker struct {
	// Server is an API server of the cluster; Token the join token.
	Server string
	Token  Token
	// Dir keeps the worker's credentials (created 0700).
	Dir string
	// NodeName and NodeIP are the Node's.
	NodeName, NodeIP string
	// Logf reports progress.
	Logf func(string, ...any)
}

// WorkerCredentials are the files the node agent runs with.
type WorkerCredentials struct {
	// Kubeconfig authenticates as system:node:<name> and lists the API servers.
	Kubeconfig string
	// ProxyKubeconfig is the same for upstream kube-proxy, which builds
	// its client from the kubeconfig alone (clientconfig.WriteProviderKubeconfig).
	ProxyKubeconfig string
	// CAFile is the cluster CA; CertFile and KeyFile serve the node API.
	CAFile, CertFile, KeyFile string
	// PodCIDR is the range the controller manager allocated to the Node.
	PodCIDR string
}

// File names in Worker.Dir.
const (
	workerCA         = "ca.crt"
	workerKubeconfig = "node.kubeconfig"
	workerClient     = "node-client"
	workerServing    = "node-serving"
)

func (w *Worker) logf(format string, args ...any) {
	if w.Logf != nil {
		w.Logf(format, args...)
	}
}

// Bootstrap gives the worker its credentials: the cluster CA (checked
// against the token's pin), a client certificate for system:node:<name>
// (approved by the controller manager for the token's group), its Node,
// the pod range allocated to it, and a serving certificate for its
// address (approved by the servers once the Node shows that address).
// Valid credentials of an earlier start are kept.
func Bootstrap(ctx context.Context, w Worker) (*WorkerCredentials, error) {
	if err := os.MkdirAll(w.Dir, 0o700); err != nil {
		return nil, err
	}
	creds := &WorkerCredentials{Kubeconfig: filepath.Join(w.Dir, workerKubeconfig), ProxyKubeconfig: filepath.Join(w.Dir, kubeproxy.KubeconfigFile), CAFile: filepath.Join(w.Dir, workerCA),
		CertFile: filepath.Join(w.Dir, workerServing+".crt"), KeyFile: filepath.Join(w.Dir, workerServing+".key")}
	ip := net.ParseIP(w.NodeIP)
	if ip == nil {
		return nil, fmt.Errorf("--node-ip=%q is not an IP address", w.NodeIP)
	}
	w.logf("joining %s as node %s: checking its CA against the token", w.Server, w.NodeName)
	info, err := Discover(ctx, w.Server, w.Token)
	if err != nil {
		return nil, fmt.Errorf("joining %s: %w", w.Server, err)
	}
	if err := atomicfile.WriteFile(creds.CAFile, info.CA, 0o644); err != nil {
		return nil, err
	}
	ca := &pki.Authority{CertPEM: info.CA}
	clientPair := filepath.Join(w.Dir, workerClient)
	if !validPair(clientPair, info.CA, nil) {
		// A node renews with its own certificate while it holds one: the
		// token it joined with has expired by then. The servers approve a
		// node's request for its own name (DecideNodeClient).
		cfg := &rest.Config{Host: w.Server, BearerToken: w.Token.Bootstrap(), Timeout: discoveryTimeout,
			TLSClientConfig: rest.TLSClientConfig{CAData: info.CA}, UserAgent: "steadyplane-node-bootstrap"}
		renewing := usablePair(clientPair, info.CA)
		var key []byte
		if renewing != nil {
			cfg.BearerToken, cfg.CertData, cfg.KeyData = "", renewing.CertPEM, renewing.KeyPEM
			key = renewing.KeyPEM
		}
		boot, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		how := "with the token"
		if renewing != nil {
			how = "with the one it has, which ends soon"
		}
		w.logf("asking for the node's client certificate (system:node:%s) %s", w.NodeName, how)
		if err := requestPair(ctx, boot, clientPair, key, w.clientRequest()); err != nil {
			if renewing == nil && (apierrors.IsUnauthorized(errors.Unwrap(err)) || apierrors.IsUnauthorized(err)) {
				return nil, ErrTokenRefused
			}
			return nil, fmt.Errorf("the node's client certificate: %w", err)
		}
	}
	kp, err := readPair(clientPair)
	if err != nil {
		return nil, err
	}
	if err := clientconfig.WriteFileKubeconfig(creds.Kubeconfig, w.Server, "system:node:"+w.NodeName, ca, kp, info.Servers); err != nil {
		return nil, err
	}
	if err := clientconfig.WriteProviderKubeconfig(creds.ProxyKubeconfig, w.Server, "system:node:"+w.NodeName, ca, kp, info.Servers); err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: w.Server, Timeout: discoveryTimeout, UserAgent: "steadyplane-node-bootstrap",
		TLSClientConfig: rest.TLSClientConfig{CAData: info.CA, CertData: kp.CertPEM, KeyData: kp.KeyPEM}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if creds.PodCIDR, err = RegisterNode(ctx, client, w.NodeName, ip, w.logf); err != nil {
		return nil, err
	}
	servingPair := filepath.Join(w.Dir, workerServing)
	// Its issuer is the cluster's kubelet CA, which a worker does not know.
	if !validPair(servingPair, nil, ip) {
		w.logf("asking for the node API's serving certificate (%s, %s)", w.NodeName, ip)
		var key []byte
		if kp, err := readPair(servingPair); err == nil {
			key = kp.KeyPEM
		}
		if err := requestPair(ctx, client, servingPair, key, w.servingRequest(ip)); err != nil {
			return nil, fmt.Errorf("the node API's serving certificate: %w", err)
		}
	}
	return creds, nil
}

// RegisterNode makes the Node (labels and address as the agent will
// write them), so that the controller manager allocates its pod range
// (one allocator for the cluster: two nodes joining at once never get the
// same range) and the servers can check the serving certificate's address,
// and waits for the range.
func RegisterNode(ctx context.Context, client kubernetes.Interface, name string, ip net.IP, logf func(string, ...any)) (string, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels(name)}}
	got, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return "", fmt.Errorf("registering Node %s: %w", name, err)
	}
	if other := internalIPs(got); len(other) > 0 && !nodeHasAddress(got, ip) {
		return "", fmt.Errorf("Node %s exists with the address %v, not %s: another host has this name; choose another --node-name, or take that node out first (steadyplane remove-node %s)", name, other, ip, name)
	}
	// The controller manager writes the Node too (its pod range): on a
	// conflict, read it again and add the address to what is there.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if nodeHasAddress(got, ip) {
			return nil
		}
		// A patch of the addresses alone, at the version read: an update
		// of the whole Node would carry the taints as they were read, and
		// the controller manager taints a new Node meanwhile, which a node
		// may not change (NodeRestriction).
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": got.ResourceVersion},
			"status":   map[string]any{"addresses": append(slices.Clone(got.Status.Addresses), corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})},
		})
		if err != nil {
			return err
		}
		updated, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if err == nil {
			got = updated
			return nil
		}
		if fresh, gerr := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); gerr == nil {
			got = fresh
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("writing Node %s's address: %w", name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if got.Spec.PodCIDR != "" {
			return true, nil
		}
		fresh, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // a server restarting: the timeout bounds it
		}
		got = fresh
		return got.Spec.PodCIDR != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("Node %s has no pod range (spec.podCIDR) 2 minutes after it was registered: is the controller manager running, with ranges left in its --cluster-cidr? (%w)", name, err)
	}
	logf("node %s: pod range %s", name, got.Spec.PodCIDR)
	return got.Spec.PodCIDR, nil
}

// nodeLabels are the labels a Node is made with, as its agent writes them.
func nodeLabels(name string) map[string]string {
	return map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
}

// nodeHasAddress says whether the Node shows ip as its InternalIP or
// ExternalIP.
func nodeHasAddress(n *corev1.Node, ip net.IP) bool {
	for _, a := range n.Status.Addresses {
		if (a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP) && net.ParseIP(a.Address).Equal(ip) {
			return true
		}
	}
	return false
}

func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

// certRequest is what a worker asks the servers to sign.
type certRequest struct {
	signer   string
	template *x509.CertificateRequest
	usages   []certificatesv1.KeyUsage
}

// clientRequest is the node's client certificate: system:node:<name>.
func (w *Worker) clientRequest() certRequest {
	return certRequest{signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		template: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + w.NodeName, Organization: []string{"system:nodes"}}},
		usages:   []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}}
}

// servingRequest is the node API's serving certificate, for its name and ip.
func (w *Worker) servingRequest(ip net.IP) certRequest {
	return certRequest{signer: certificatesv1.KubeletServingSignerName,
		template: &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + w.NodeName, Organization: []string{"system:nodes"}},
			DNSNames: []string{w.NodeName}, IPAddresses: []net.IP{ip}},
		usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}}
}

// requestPair asks for a certificate of r for keyPEM (a new key when nil
// or unreadable), waits until it is issued, and writes <base>.crt (0600),
// and <base>.key first when the key is new. A renewal keeps the key, so
// that its one write is atomic: a reader never meets a certificate beside
// a key that is not its own.
func requestPair(ctx context.Context, client kubernetes.Interface, base string, keyPEM []byte, r certRequest) error {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	newKey := keyPEM == nil || err != nil
	if newKey {
		if keyPEM, err = keyutil.MakeEllipticPrivateKeyPEM(); err != nil {
			return err
		}
		if key, err = keyutil.ParsePrivateKeyPEM(keyPEM); err != nil {
			return err
		}
	}
	csrPEM, err := certutil.MakeCSRFromTemplate(key, r.template)
	if err != nil {
		return err
	}
	name, uid, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, "", r.signer, nil, r.usages, key)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wctx, client, name, uid)
	if err != nil {
		return fmt.Errorf("CertificateSigningRequest %s not issued: %w", name, err)
	}
	if newKey {
		if err := atomicfile.WriteFile(base+".key", keyPEM, 0o600); err != nil {
			return err
		}
	}
	return atomicfile.WriteFile(base+".crt", certPEM, 0o600)
}

func readPair(base string) (*pki.KeyPair, error) { return pki.ReadKeyPair(base+".crt", base+".key") }

// usablePair is <base>.crt/.key when it holds a certificate from caPEM
// that is still valid (perhaps close to its end), nil otherwise.
func usablePair(base string, caPEM []byte) *pki.KeyPair {
	kp, err := readPair(base)
	if err != nil {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(kp.CertPEM)
	if err != nil {
		return nil
	}
	roots, err := certutil.NewPoolFromBytes(caPEM)
	if err != nil {
		return nil
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil
	}
	return kp
}

// validPair says whether <base>.crt/.key hold a certificate from caPEM
// (any issuer when nil; for ip, when set) that is not close to its end.
func validPair(base string, caPEM []byte, ip net.IP) bool {
	kp, err := readPair(base)
	if err != nil {
		return false
	}
	certs, err := certutil.ParseCertsPEM(kp.CertPEM)
	if err != nil || !time.Now().Before(renewalDue(base)) {
		return false
	}
	if caPEM == nil {
		return ip == nil || certs[0].VerifyHostname(ip.String()) == nil
	}
	roots, err := certutil.NewPoolFromBytes(caPEM)
	if err != nil {
		return false
	}
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if ip != nil {
		opts.DNSName = ip.String()
	}
	_, err = certs[0].Verify(opts)
	return err == nil
}
