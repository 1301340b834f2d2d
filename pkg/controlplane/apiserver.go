package controlplane

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/healthz"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// APIServerURL is where clients reach the API server.
func (cp *ControlPlane) APIServerURL() string {
	host := cp.opts.BindAddress
	if ip := netutils.ParseIPSloppy(host); ip == nil || ip.IsUnspecified() {
		host = cp.advertise.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(cp.opts.APIServerPort))
}

func (cp *ControlPlane) apiserverArgs() []string {
	var also []string
	if cp.bridgeAddress != nil {
		also = []string{cp.bridgeAddress.String()}
	}
	return append(APIServerArgs(cp.pki, APIServer{
		AdditionalBindAddresses:    also,
		EtcdServers:                []string{cp.etcdClientURL()},
		BindAddress:                cp.opts.BindAddress,
		AdvertiseAddress:           cp.advertise,
		Port:                       cp.opts.APIServerPort,
		ServiceCIDR:                cp.opts.ServiceCIDR,
		CertDir:                    filepath.Join(cp.dataDir, "apiserver-certs"),
		RetryAfterIfNotInitialized: cp.opts.RetryAfterIfNotInitialized,
		RetryAfter:                 cp.opts.RetryAfter,
		AlternativeServices:        cp.opts.AlternativeServices,
		AdmissionConfigFile:        cp.admissionConfig,
		EncryptionConfigFile:       cp.encryptionConfigPath(),
	}), cp.opts.ExtraAPIServerArgs...)
}

// APIServer is what differs between the API servers of a control plane.
type APIServer struct {
	EtcdServers []string
	BindAddress string
	// AdditionalBindAddresses are listened on besides BindAddress, on the
	// same port.
	AdditionalBindAddresses    []string
	AdvertiseAddress           net.IP
	Port                       int
	ServiceCIDR                string
	CertDir                    string
	RetryAfterIfNotInitialized bool
	RetryAfter                 time.Duration
	AlternativeServices        bool
	// AdmissionConfigFile configures admission plugins (Pod Security);
	// "" for the plugins' defaults.
	AdmissionConfigFile string
	// EncryptionConfigFile says how Secrets are encrypted in etcd (read
	// again when it changes, so keys rotate without a restart); "" for
	// not at all.
	EncryptionConfigFile string
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
		"--kubelet-certificate-authority=" + p.KubeletCA.CertPath,
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		// Webhooks and aggregated API servers are reached at their
		// Service's endpoints (pod addresses), not its cluster IP: the API
		// server's host needs no Service proxy for them, and one down
		// does not take admission with it.
		"--enable-aggregator-routing=true",
		"--authorization-mode=Node,RBAC",
		// Join tokens (steadyplane up --server --token) are bootstrap tokens.
		"--enable-bootstrap-token-auth=true",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--cert-dir=" + s.CertDir,
		"--startup-send-retry-after-if-not-initialized=" + strconv.FormatBool(s.RetryAfterIfNotInitialized),
		"--startup-retry-after=" + s.RetryAfter.String(),
		"--enable-alternative-services=" + strconv.FormatBool(s.AlternativeServices),
		// On SIGTERM: drain the requests in flight (new ones get 429 and
		// Retry-After), then close with 2s for watches, instead of waiting
		// up to 60s for them; a restart (a new revision, "up" stopping)
		// is then an outage of seconds, not of the 30s stop grace.
		"--shutdown-send-retry-after=true",
	}
	if len(s.AdditionalBindAddresses) > 0 {
		args = append(args, "--additional-bind-addresses="+strings.Join(s.AdditionalBindAddresses, ","))
	}
	if s.AdmissionConfigFile != "" {
		args = append(args, "--admission-control-config-file="+s.AdmissionConfigFile)
	}
	if s.EncryptionConfigFile != "" {
		args = append(args, "--encryption-provider-config="+s.EncryptionConfigFile, "--encryption-provider-config-automatic-reload=true")
	}
	// The kubernetes Endpoints may not hold loopback addresses; a server that
	// only listens on loopback has no address to publish there.
	if s.AdvertiseAddress.IsLoopback() {
		args = append(args, "--endpoint-reconciler-type=none")
	}
	return args
}

// StartAPIServer starts the API server without waiting for it.
func (cp *ControlPlane) StartAPIServer() error {
	return cp.launcher.Start(context.Background(), apiserverComponent)
}

// WaitAPIServerReady waits until the API server's /readyz answers 200,
// printing which checks are still pending every few seconds.
func (cp *ControlPlane) WaitAPIServerReady(ctx context.Context) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	return WaitReadyz(ctx, cfg, cp.launcher.Runner(apiserverComponent), cp.opts.ReadyTimeout, cp.progressf)
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
			status = "readiness checks pending: " + strings.Join(healthz.FailedChecks(string(body)), ", ")
		} else if err != nil && !isConnRefused(err) {
			status = err.Error()
		}
		if progressf != nil && time.Since(lastShown) >= 3*time.Second {
			lastShown = time.Now()
			progressf("  waiting for the API server: %s", status)
		}
		return false, status
	})
}
