// Package controlplane runs a single-node steadyplane control plane: it
// prepares the PKI and kubeconfig in a data directory, starts "steadyplane etcd"
// and "steadyplane apiserver" as child processes, waits until each is ready,
// restarts either if it dies, and stops them in order. "steadyplane up" is a
// thin shell over Run; tests and benchmarks use the same steps one by one.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/node/runtime/runc"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// Options configure a single-node control plane.
type Options struct {
	// DataDir holds the PKI, the kubeconfig, etcd's data and the logs.
	DataDir string
	// BindAddress is the address the API server listens on.
	BindAddress string
	// AdvertiseAddress is the address the API server publishes; empty means BindAddress.
	AdvertiseAddress string
	// APIServerPort is the API server's HTTPS port.
	APIServerPort int
	// EtcdClientPort and EtcdPeerPort are etcd's ports, on 127.0.0.1.
	EtcdClientPort, EtcdPeerPort int
	// ServiceCIDR is the range of service cluster IPs.
	ServiceCIDR string
	// RetryAfterIfNotInitialized turns on the KEP-3028 filter.
	RetryAfterIfNotInitialized bool
	// RetryAfter is the KEP-3028 delay.
	RetryAfter time.Duration
	// AlternativeServices turns on the KEP-3037 Alt-Svc filter. A single
	// server advertises nothing; it matters once more API servers share etcd.
	AlternativeServices bool
	// Node starts a node agent ("steadyplane node") as a third child.
	Node bool
	// NodeName is the node agent's Node; empty means "steadyplane".
	NodeName string
	// NodeIP is the Node's and its pods' address; empty means BindAddress.
	NodeIP string
	// NodeMetricsPort serves the node agent's metrics on 127.0.0.1; 0 for none.
	NodeMetricsPort int
	// NodeAPIPort is the node agent's API port on the node IP (logs, exec,
	// port-forward), the kubelet's 10250.
	NodeAPIPort int
	// NodeRuntime is the node agent's --runtime: auto, runc or process.
	NodeRuntime string
	// PodCIDR is the node's range of pod addresses; CNIBridge the host
	// bridge pods join.
	PodCIDR, CNIBridge string
	// ReadinessController starts "steadyplane readiness-controller" (the
	// readiness-gate webhook and the load-balancer-ready gate).
	ReadinessController bool
	// ReadinessWebhookPort is the webhook's port on BindAddress.
	ReadinessWebhookPort int
	// ExtraAPIServerArgs are appended to the API server's arguments, so they
	// override steadyplane's choices.
	ExtraAPIServerArgs []string
	// Binary is the steadyplane executable to start the children from; empty
	// means this process's own executable.
	Binary string
	// ReadyTimeout bounds the wait for each component to become ready.
	ReadyTimeout time.Duration
	// StopGrace is how long a child may take to stop after SIGTERM.
	StopGrace time.Duration
	// Out receives progress lines; nil discards them.
	Out io.Writer
}

// NewOptions returns the defaults of "steadyplane up".
func NewOptions() *Options {
	return &Options{
		DataDir:                    ".steadyplane",
		BindAddress:                "127.0.0.1",
		APIServerPort:              6443,
		EtcdClientPort:             2379,
		EtcdPeerPort:               2380,
		ServiceCIDR:                "10.96.0.0/16",
		RetryAfterIfNotInitialized: true,
		RetryAfter:                 5 * time.Second,
		AlternativeServices:        true,
		Node:                       true,
		NodeName:                   "steadyplane",
		NodeMetricsPort:            10255,
		NodeAPIPort:                10250,
		NodeRuntime:                "auto",
		PodCIDR:                    "10.244.0.0/24",
		CNIBridge:                  "steadyplane0",
		ReadinessController:        true,
		ReadinessWebhookPort:       9443,
		ReadyTimeout:               3 * time.Minute,
		StopGrace:                  30 * time.Second,
	}
}

// ControlPlane is a prepared data directory and the child processes run from it.
type ControlPlane struct {
	opts       Options
	dataDir    string
	pki        *pki.Cluster
	kubeconfig string
	advertise  net.IP
	lock       *os.File

	Etcd, APIServer, Node, Readiness *Process
}

// Prepare checks the options, takes the data directory's lock (one control
// plane per directory), and creates or reuses the PKI and the admin kubeconfig.
func Prepare(o Options) (*ControlPlane, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	lock, err := lockDir(dataDir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{opts: o, dataDir: dataDir, lock: lock}
	if cp.opts.Binary == "" {
		if cp.opts.Binary, err = os.Executable(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if err := cp.preparePKI(); err != nil {
		cp.Close()
		return nil, err
	}
	cp.Etcd = &Process{Name: "etcd", Binary: cp.opts.Binary, Args: cp.etcdArgs(), LogPath: filepath.Join(dataDir, "logs", "etcd.log")}
	cp.APIServer = &Process{Name: "apiserver", Binary: cp.opts.Binary, Args: cp.apiserverArgs(), LogPath: filepath.Join(dataDir, "logs", "apiserver.log")}
	if cp.opts.Node {
		if err := cp.prepareNode(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	if cp.opts.ReadinessController {
		if err := cp.prepareReadiness(); err != nil {
			cp.Close()
			return nil, err
		}
	}
	return cp, nil
}

func (o *Options) validate() error {
	var errs []string
	if netutils.ParseIPSloppy(o.BindAddress) == nil {
		errs = append(errs, fmt.Sprintf("--bind-address=%q is not an IP address", o.BindAddress))
	}
	if o.AdvertiseAddress != "" && netutils.ParseIPSloppy(o.AdvertiseAddress) == nil {
		errs = append(errs, fmt.Sprintf("--advertise-address=%q is not an IP address", o.AdvertiseAddress))
	}
	for name, port := range map[string]int{"--apiserver-port": o.APIServerPort, "--etcd-client-port": o.EtcdClientPort, "--etcd-peer-port": o.EtcdPeerPort} {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Sprintf("%s=%d is not a port", name, port))
		}
	}
	if o.EtcdClientPort == o.EtcdPeerPort {
		errs = append(errs, "--etcd-client-port and --etcd-peer-port must differ")
	}
	if _, _, err := netutils.ParseCIDRSloppy(o.ServiceCIDR); err != nil {
		errs = append(errs, fmt.Sprintf("--service-cidr=%q: %v", o.ServiceCIDR, err))
	}
	if o.DataDir == "" {
		errs = append(errs, "--data-dir must not be empty")
	}
	if o.NodeIP != "" && netutils.ParseIPSloppy(o.NodeIP) == nil {
		errs = append(errs, fmt.Sprintf("--node-ip=%q is not an IP address", o.NodeIP))
	}
	if o.Node && len(validation.IsDNS1123Subdomain(o.NodeName)) > 0 {
		errs = append(errs, fmt.Sprintf("--node-name=%q is not a valid node name: %s", o.NodeName, strings.Join(validation.IsDNS1123Subdomain(o.NodeName), "; ")))
	}
	if o.ReadinessController && (o.ReadinessWebhookPort < 1 || o.ReadinessWebhookPort > 65535) {
		errs = append(errs, fmt.Sprintf("--readiness-webhook-port=%d is not a port", o.ReadinessWebhookPort))
	}
	if o.NodeMetricsPort < 0 || o.NodeMetricsPort > 65535 {
		errs = append(errs, fmt.Sprintf("--node-metrics-port=%d is not a port", o.NodeMetricsPort))
	}
	if o.NodeAPIPort < 1 || o.NodeAPIPort > 65535 {
		errs = append(errs, fmt.Sprintf("--node-api-port=%d is not a port", o.NodeAPIPort))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// lockDir takes an exclusive lock on the data directory, so that a second
// "up" on it fails at once instead of corrupting etcd's data.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another steadyplane (lock %s): %w", dir, f.Name(), err)
	}
	return f, nil
}

func (cp *ControlPlane) preparePKI() error {
	cp.advertise = netutils.ParseIPSloppy(cp.opts.AdvertiseAddress)
	if cp.advertise == nil {
		cp.advertise = netutils.ParseIPSloppy(cp.opts.BindAddress)
	}
	_, serviceNet, _ := netutils.ParseCIDRSloppy(cp.opts.ServiceCIDR)
	serviceIP, err := netutils.GetIndexedIP(serviceNet, 1)
	if err != nil {
		return fmt.Errorf("--service-cidr=%s: %w", cp.opts.ServiceCIDR, err)
	}
	store := &pki.Store{Dir: filepath.Join(cp.dataDir, "pki"), Logf: func(f string, a ...any) { cp.progressf("pki: "+f, a...) }}
	cp.pki, err = store.EnsureCluster(pki.ClusterConfig{
		APIServerIPs: []net.IP{netutils.ParseIPSloppy(cp.opts.BindAddress), cp.advertise, serviceIP},
	})
	if err != nil {
		return err
	}
	cp.kubeconfig = filepath.Join(cp.dataDir, "admin.kubeconfig")
	return clientconfig.WriteKubeconfig(cp.kubeconfig, cp.APIServerURL(), "admin", cp.pki.CA, cp.pki.Admin, cp.alternatives())
}

// prepareNode issues the node agent's credentials (system:node:<name> in
// system:nodes, for the Node authorizer and NodeRestriction) and its process.
func (cp *ControlPlane) prepareNode() error {
	store := &pki.Store{Dir: filepath.Join(cp.dataDir, "pki"), Logf: func(f string, a ...any) { cp.progressf("pki: "+f, a...) }}
	kp, err := store.EnsureCert(cp.pki.CA, pki.CertSpec{
		Name: "node-" + cp.opts.NodeName, CommonName: "system:node:" + cp.opts.NodeName,
		Organization: []string{"system:nodes"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(cp.dataDir, "node.kubeconfig")
	if err := clientconfig.WriteKubeconfig(kubeconfig, cp.APIServerURL(), "system:node:"+cp.opts.NodeName, cp.pki.CA, kp, cp.alternatives()); err != nil {
		return err
	}
	nodeIP := cp.opts.NodeIP
	if nodeIP == "" {
		nodeIP = cp.advertise.String()
	}
	// The node API's serving certificate, for the address the API server
	// dials (the Node's InternalIP) and the node's name.
	serving, err := store.EnsureCert(cp.pki.CA, pki.CertSpec{
		Name: "node-" + cp.opts.NodeName + "-serving", CommonName: "system:node:" + cp.opts.NodeName,
		Organization: []string{"system:nodes"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{cp.opts.NodeName}, IPs: []net.IP{netutils.ParseIPSloppy(nodeIP)},
	})
	if err != nil {
		return err
	}
	manifests := filepath.Join(cp.dataDir, "manifests")
	if err := os.MkdirAll(manifests, 0o700); err != nil {
		return err
	}
	args := []string{"node", "--kubeconfig=" + kubeconfig, "--node-name=" + cp.opts.NodeName, "--node-ip=" + nodeIP,
		"--root-dir=" + filepath.Join(cp.dataDir, "node"), "--pod-manifest-path=" + manifests,
		"--runtime=" + cp.opts.NodeRuntime, "--pod-cidr=" + cp.opts.PodCIDR, "--cni-bridge=" + cp.opts.CNIBridge,
		"--port=" + strconv.Itoa(cp.opts.NodeAPIPort), "--tls-cert-file=" + serving.CertPath, "--tls-private-key-file=" + serving.KeyPath,
		"--client-ca-file=" + cp.pki.CA.CertPath}
	name, warning, err := runc.Choose(cp.opts.NodeRuntime)
	if err != nil {
		return err
	}
	if warning != "" {
		cp.progressf("WARNING: %s", warning)
	} else {
		cp.progressf("node: pods run under %s, pod addresses from %s", name, cp.opts.PodCIDR)
	}
	if cp.opts.NodeMetricsPort != 0 {
		args = append(args, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(cp.opts.NodeMetricsPort))
	}
	cp.Node = &Process{Name: "node", Binary: cp.opts.Binary, Args: args, LogPath: filepath.Join(cp.dataDir, "logs", "node.log")}
	return nil
}

// prepareReadiness issues the webhook's serving certificate from the cluster
// CA (which the API server is given as the caBundle) and its process.
func (cp *ControlPlane) prepareReadiness() error {
	store := &pki.Store{Dir: filepath.Join(cp.dataDir, "pki"), Logf: func(f string, a ...any) { cp.progressf("pki: "+f, a...) }}
	kp, err := store.EnsureCert(cp.pki.CA, pki.CertSpec{
		Name: "readiness-webhook", CommonName: "steadyplane-readiness-webhook",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPs: []net.IP{netutils.ParseIPSloppy(cp.opts.BindAddress)},
	})
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cp.opts.BindAddress, strconv.Itoa(cp.opts.ReadinessWebhookPort))
	cp.Readiness = &Process{Name: "readiness-controller", Binary: cp.opts.Binary, LogPath: filepath.Join(cp.dataDir, "logs", "readiness-controller.log"), Args: []string{
		"readiness-controller", "--kubeconfig=" + cp.kubeconfig, "--webhook-bind-address=" + addr,
		"--tls-cert-file=" + kp.CertPath, "--tls-private-key-file=" + kp.KeyPath, "--ca-file=" + cp.pki.CA.CertPath,
	}}
	return nil
}

// WaitReadinessControllerReady waits until the readiness-gate webhook is registered.
func (cp *ControlPlane) WaitReadinessControllerReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return poll(ctx, cp.Readiness, cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "steadyplane-readiness-gates", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// WaitNodeReady waits until the node agent's Node is registered and Ready.
func (cp *ControlPlane) WaitNodeReady(ctx context.Context) error {
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	return poll(ctx, cp.Node, cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		n, err := client.CoreV1().Nodes().Get(ctx, cp.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, "Node not Ready"
	})
}

// alternatives are the API servers written into the kubeconfigs'
// steadyplane.io/alternative-services extension: the one server of a
// single-node control plane, which more servers will join.
func (cp *ControlPlane) alternatives() []string {
	u, err := url.Parse(cp.APIServerURL())
	if err != nil {
		return nil
	}
	return []string{u.Host}
}

// APIServerURL is where clients reach the API server.
func (cp *ControlPlane) APIServerURL() string {
	host := cp.opts.BindAddress
	if ip := netutils.ParseIPSloppy(host); ip == nil || ip.IsUnspecified() {
		host = cp.advertise.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(cp.opts.APIServerPort))
}

// Kubeconfig is the path of the admin kubeconfig.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// DataDir is the absolute data directory.
func (cp *ControlPlane) DataDir() string { return cp.dataDir }

// PKI returns the certificates and keys of the control plane.
func (cp *ControlPlane) PKI() *pki.Cluster { return cp.pki }

// adminClient returns a clientset with the admin credentials.
func (cp *ControlPlane) adminClient() (kubernetes.Interface, error) {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// AdminConfig returns a client configuration with the admin credentials.
func (cp *ControlPlane) AdminConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
}

func (cp *ControlPlane) etcdClientURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(cp.opts.EtcdClientPort)
}

func (cp *ControlPlane) etcdArgs() []string {
	peer := "https://127.0.0.1:" + strconv.Itoa(cp.opts.EtcdPeerPort)
	return EtcdArgs(cp.pki, EtcdMember{
		Name:           "steadyplane",
		DataDir:        filepath.Join(cp.dataDir, "etcd"),
		ClientURL:      cp.etcdClientURL(),
		PeerURL:        peer,
		InitialCluster: "steadyplane=" + peer,
	})
}

// EtcdMember is what differs between the members of an etcd cluster.
type EtcdMember struct {
	Name, DataDir, ClientURL, PeerURL string
	// InitialCluster is etcd's --initial-cluster: name=peerURL,...
	InitialCluster string
}

// EtcdArgs returns the arguments of "steadyplane etcd" for member m, with
// TLS and client-certificate auth from the cluster's etcd CA.
func EtcdArgs(p *pki.Cluster, m EtcdMember) []string {
	return []string{
		"etcd",
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.ClientURL,
		"--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.PeerURL,
		"--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + m.InitialCluster,
		"--cert-file=" + p.EtcdServer.CertPath,
		"--key-file=" + p.EtcdServer.KeyPath,
		"--trusted-ca-file=" + p.EtcdCA.CertPath,
		"--peer-cert-file=" + p.EtcdServer.CertPath,
		"--peer-key-file=" + p.EtcdServer.KeyPath,
		"--peer-trusted-ca-file=" + p.EtcdCA.CertPath,
	}
}

func (cp *ControlPlane) apiserverArgs() []string {
	return append(APIServerArgs(cp.pki, APIServer{
		EtcdServers:                []string{cp.etcdClientURL()},
		BindAddress:                cp.opts.BindAddress,
		AdvertiseAddress:           cp.advertise,
		Port:                       cp.opts.APIServerPort,
		ServiceCIDR:                cp.opts.ServiceCIDR,
		CertDir:                    filepath.Join(cp.dataDir, "apiserver-certs"),
		RetryAfterIfNotInitialized: cp.opts.RetryAfterIfNotInitialized,
		RetryAfter:                 cp.opts.RetryAfter,
		AlternativeServices:        cp.opts.AlternativeServices,
	}), cp.opts.ExtraAPIServerArgs...)
}

// APIServer is what differs between the API servers of a control plane.
type APIServer struct {
	EtcdServers                []string
	BindAddress                string
	AdvertiseAddress           net.IP
	Port                       int
	ServiceCIDR                string
	CertDir                    string
	RetryAfterIfNotInitialized bool
	RetryAfter                 time.Duration
	AlternativeServices        bool
}

// APIServerArgs returns the arguments of "steadyplane apiserver" for s, with
// the cluster's certificates, RBAC and Node authorization.
func APIServerArgs(p *pki.Cluster, s APIServer) []string {
	args := []string{
		"apiserver",
		"--etcd-servers=" + strings.Join(s.EtcdServers, ","),
		"--etcd-cafile=" + p.EtcdCA.CertPath,
		"--etcd-certfile=" + p.APIServerEtcdClient.CertPath,
		"--etcd-keyfile=" + p.APIServerEtcdClient.KeyPath,
		"--bind-address=" + s.BindAddress,
		"--advertise-address=" + s.AdvertiseAddress.String(),
		"--secure-port=" + strconv.Itoa(s.Port),
		"--tls-cert-file=" + p.APIServer.CertPath,
		"--tls-private-key-file=" + p.APIServer.KeyPath,
		"--client-ca-file=" + p.CA.CertPath,
		// Node agents' APIs: verified against the cluster CA, reached on
		// the address each Node publishes (not its host name, which may
		// resolve anywhere).
		"--kubelet-client-certificate=" + p.APIServerKubeletClient.CertPath,
		"--kubelet-client-key=" + p.APIServerKubeletClient.KeyPath,
		"--kubelet-certificate-authority=" + p.CA.CertPath,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// No controller manager creates the default service accounts, so this
		// plugin would refuse every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--cert-dir=" + s.CertDir,
		"--startup-send-retry-after-if-not-initialized=" + strconv.FormatBool(s.RetryAfterIfNotInitialized),
		"--startup-retry-after=" + s.RetryAfter.String(),
		"--enable-alternative-services=" + strconv.FormatBool(s.AlternativeServices),
	}
	// The kubernetes Endpoints may not hold loopback addresses; a server that
	// only listens on loopback has no address to publish there.
	if s.AdvertiseAddress.IsLoopback() {
		args = append(args, "--endpoint-reconciler-type=none")
	}
	return args
}

// Close releases the data directory lock. It does not stop the children.
func (cp *ControlPlane) Close() {
	if cp.lock != nil {
		cp.lock.Close()
		cp.lock = nil
	}
}

func (cp *ControlPlane) progressf(format string, args ...any) {
	if cp.opts.Out != nil {
		fmt.Fprintf(cp.opts.Out, format+"\n", args...)
	}
}

// StartEtcd starts etcd and waits until it answers /health.
func (cp *ControlPlane) StartEtcd(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if err := cp.Etcd.Start(); err != nil {
		return 0, err
	}
	if err := cp.waitEtcd(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (cp *ControlPlane) etcdHTTPClient() (*http.Client, error) {
	pair, err := tls.X509KeyPair(cp.pki.APIServerEtcdClient.CertPEM, cp.pki.APIServerEtcdClient.KeyPEM)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cp.pki.EtcdCA.Cert)
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}},
	}, nil
}

func (cp *ControlPlane) waitEtcd(ctx context.Context) error {
	client, err := cp.etcdHTTPClient()
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	return poll(ctx, cp.Etcd, cp.opts.ReadyTimeout, 200*time.Millisecond, func(ctx context.Context) (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.etcdClientURL()+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var health struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&health)
		if resp.StatusCode == http.StatusOK && health.Health == "true" {
			return true, ""
		}
		return false, fmt.Sprintf("/health: %d %s", resp.StatusCode, health.Reason)
	})
}

// StartAPIServer starts the API server without waiting for it.
func (cp *ControlPlane) StartAPIServer() error { return cp.APIServer.Start() }

// WaitAPIServerReady waits until the API server's /readyz answers 200,
// printing which checks are still pending every few seconds.
func (cp *ControlPlane) WaitAPIServerReady(ctx context.Context) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	return WaitReadyz(ctx, cfg, cp.APIServer, cp.opts.ReadyTimeout, cp.progressf)
}

// WaitReadyz waits until the API server cfg points at answers /readyz with
// 200, for at most timeout. It fails early, with the end of its log, if p
// exits. progressf (may be nil) gets the pending checks every few seconds.
func WaitReadyz(ctx context.Context, cfg *rest.Config, p *Process, timeout time.Duration, progressf func(string, ...any)) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	rc := client.Discovery().RESTClient()
	var lastShown time.Time
	return poll(ctx, p, timeout, 250*time.Millisecond, func(ctx context.Context) (bool, string) {
		var code int
		body, err := rc.Get().AbsPath("/readyz").Param("verbose", "true").Do(ctx).StatusCode(&code).Raw()
		if code == http.StatusOK {
			return true, ""
		}
		status := "not listening yet"
		if code != 0 {
			status = "readiness checks pending: " + strings.Join(PendingChecks(string(body)), ", ")
		} else if err != nil && !isConnRefused(err) {
			status = err.Error()
		}
		if progressf != nil && time.Since(lastShown) >= 3*time.Second {
			lastShown = time.Now()
			progressf("  waiting for %s: %s", p.Name, status)
		}
		return false, status
	})
}

// PendingChecks returns the names of the failing checks in a verbose /readyz
// or /livez answer (lines like "[-]poststarthook/rbac/bootstrap-roles failed: ...").
func PendingChecks(verbose string) []string {
	var out []string
	for _, line := range strings.Split(verbose, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, " ")
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// poll calls check until it succeeds, p exits (an error with the end of its
// log), ctx ends, or timeout passes.
func poll(ctx context.Context, p *Process, timeout, interval time.Duration, check func(context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		ok, status := check(ctx)
		if ok {
			return nil
		}
		last = status
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited while starting (%v); last lines of %s:\n%s", p.Name, p.Err(), p.LogPath, p.LogTail(15))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready after %v (%s); see %s", p.Name, timeout, last, p.LogPath)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Stop stops the API server, then etcd, each with the configured grace.
func (cp *ControlPlane) Stop() {
	for _, p := range []*Process{cp.Readiness, cp.Node, cp.APIServer, cp.Etcd} {
		if p == nil || p.Exited() == nil {
			continue
		}
		select {
		case <-p.Exited():
			continue
		default:
		}
		grace := cp.opts.StopGrace
		if p == cp.Node {
			// The node agent stops its pods with their grace periods (30s
			// unless set): killed sooner, it would leave them running.
			grace = max(grace, nodeStopGrace)
		}
		cp.progressf("stopping %s", p.Name)
		if !p.Stop(grace) {
			cp.progressf("%s did not stop within %v and was killed", p.Name, grace)
		}
	}
}

// nodeStopGrace is how long the node agent may take to stop: the default
// pod grace period and some.
const nodeStopGrace = 45 * time.Second

// Run is "steadyplane up": prepare, start etcd and the API server, print how
// to reach the cluster, restart a child that dies, and stop both when ctx ends.
func Run(ctx context.Context, o Options) error {
	cp, err := Prepare(o)
	if err != nil {
		return err
	}
	defer cp.Close()
	defer cp.Stop()
	cp.progressf("data directory %s (certificates in pki/, logs in logs/)", cp.dataDir)

	cp.progressf("starting etcd (log: %s)", cp.Etcd.LogPath)
	d, err := cp.StartEtcd(ctx)
	if err != nil {
		return err
	}
	cp.progressf("etcd ready in %.1fs (%s)", d.Seconds(), cp.etcdClientURL())

	cp.progressf("starting apiserver (log: %s)", cp.APIServer.LogPath)
	start := time.Now()
	if err := cp.StartAPIServer(); err != nil {
		return err
	}
	if err := cp.WaitAPIServerReady(ctx); err != nil {
		return err
	}
	cp.progressf("apiserver ready in %.1fs (%s)", time.Since(start).Seconds(), cp.APIServerURL())
	if cp.Node != nil {
		cp.progressf("starting node agent %s (log: %s)", cp.opts.NodeName, cp.Node.LogPath)
		start = time.Now()
		if err := cp.Node.Start(); err != nil {
			return err
		}
		if err := cp.WaitNodeReady(ctx); err != nil {
			return err
		}
		cp.progressf("node %s ready in %.1fs (static pod manifests: %s)", cp.opts.NodeName, time.Since(start).Seconds(), filepath.Join(cp.dataDir, "manifests"))
	}
	if cp.Readiness != nil {
		cp.progressf("starting readiness-gate webhook and controller (log: %s)", cp.Readiness.LogPath)
		start = time.Now()
		if err := cp.Readiness.Start(); err != nil {
			return err
		}
		if err := cp.WaitReadinessControllerReady(ctx); err != nil {
			return err
		}
		cp.progressf("readiness-gate webhook ready in %.1fs (label a namespace steadyplane.io/readiness-gates to use it)", time.Since(start).Seconds())
	}
	cp.progressf("kubeconfig: %s", cp.kubeconfig)
	cp.progressf("  kubectl --kubeconfig %s get namespaces", cp.kubeconfig)
	cp.progressf("  steadyplane kubectl --kubeconfig %s get namespaces   # fails over between API servers", cp.kubeconfig)
	cp.progressf("steadyplane is up; press Ctrl-C to stop")
	return cp.supervise(ctx)
}

// supervise restarts a child that exits until ctx ends, with the kubelet's
// style of backoff (doubling from 1s to 30s, forgotten after a long healthy run).
func (cp *ControlPlane) supervise(ctx context.Context) error {
	backoff := flowcontrol.NewBackOff(time.Second, 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			cp.progressf("shutting down")
			return nil
		case <-cp.Etcd.Exited():
			if err := cp.restart(ctx, cp.Etcd, backoff, cp.waitEtcd); err != nil {
				return err
			}
		case <-cp.APIServer.Exited():
			if err := cp.restart(ctx, cp.APIServer, backoff, cp.WaitAPIServerReady); err != nil {
				return err
			}
		case <-exitedOf(cp.Node):
			if err := cp.restart(ctx, cp.Node, backoff, cp.WaitNodeReady); err != nil {
				return err
			}
		case <-exitedOf(cp.Readiness):
			if err := cp.restart(ctx, cp.Readiness, backoff, cp.WaitReadinessControllerReady); err != nil {
				return err
			}
		}
	}
}

// exitedOf is an optional child's exit channel, or nil (never ready) without one.
func exitedOf(p *Process) <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.Exited()
}

func (cp *ControlPlane) restart(ctx context.Context, p *Process, backoff *flowcontrol.Backoff, wait func(context.Context) error) error {
	backoff.Next(p.Name, backoff.Clock.Now())
	delay := backoff.Get(p.Name)
	cp.progressf("%s exited unexpectedly (%v); restarting in %v. Last lines of %s:\n%s", p.Name, p.Err(), delay, p.LogPath, p.LogTail(10))
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(delay):
	}
	if err := p.Start(); err != nil {
		return err
	}
	if err := wait(ctx); err != nil {
		cp.progressf("%s did not become ready after restart: %v", p.Name, err)
		return nil // its exit, if it comes, is handled by the next loop turn
	}
	cp.progressf("%s ready again", p.Name)
	return nil
}
