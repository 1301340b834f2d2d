package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/fallback/bootstrap"
	"github.com/steadyplane/steadyplane/pkg/healthz"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// prepareAPIServer decides the API server's process.
func (cp *ControlPlane) prepareAPIServer() error {
	cp.APIServer = &Process{Name: "apiserver", Binary: cp.opts.Binary, Args: cp.apiserverArgs(), LogPath: cp.dir.log("apiserver")}
	return nil
}

func (cp *ControlPlane) apiserverArgs() []string {
	var also []string
	if cp.addr.bridge != nil {
		also = []string{cp.addr.bridge.String()}
	}
	return append(APIServerArgs(cp.pki, APIServer{
		AdditionalBindAddresses:    also,
		EtcdServers:                []string{cp.addr.etcdClientURL()},
		BindAddress:                cp.opts.BindAddress,
		AdvertiseAddress:           cp.addr.advertise,
		Port:                       cp.opts.APIServerPort,
		ServiceCIDR:                cp.opts.ServiceCIDR,
		CertDir:                    cp.dir.apiserverCerts(),
		RetryAfterIfNotInitialized: cp.opts.RetryAfterIfNotInitialized,
		RetryAfter:                 cp.opts.RetryAfter,
		AlternativeServices:        cp.opts.AlternativeServices,
		AdmissionConfigFile:        cp.admissionConfig,
		EncryptionConfigFile:       cp.dir.encryptionConfig(),
	}), cp.opts.ExtraAPIServerArgs...)
}

// apiserverPod is the API server's static pod: the PKI, its certificates'
// directory and its configuration; probes on its bind address.
func (cp *ControlPlane) apiserverPod(binary string) staticpod.Spec {
	return staticpod.Spec{Name: apiserverComponent, Binary: binary, Args: cp.APIServer.Args,
		HostPaths: []staticpod.HostPath{cp.pkiPath(), {Path: cp.dir.apiserverCerts()}, {Path: cp.dir.apiserverConfigDir(), ReadOnly: true}},
		Liveness:  &staticpod.HTTPSCheck{Host: cp.addr.probeHost(), Port: cp.opts.APIServerPort, Path: "/livez"},
		// Without it, a revision that crashes is Ready for the moment
		// it runs, and the operator would take that for a rollout done.
		Readiness: &staticpod.HTTPSCheck{Host: cp.addr.probeHost(), Port: cp.opts.APIServerPort, Path: "/readyz"}}
}

// installAPIServer puts the API server's static pod in place: its
// revision (the fallback's bootstrap: the last-known-good one, or the
// first) when it runs as revisions, else its manifest.
func (cp *ControlPlane) installAPIServer(ctx context.Context) error {
	if !cp.fallbackOn() {
		return cp.writeManifests(apiserverComponent)
	}
	if err := bootstrap.InstallOperand(ctx, cp.dir.apiserverRevisions(), cp.firstRevision, cp.progressf); err != nil {
		return fmt.Errorf("installing the API server's revision: %w", err)
	}
	return nil
}

// waitAPIServerServing waits until the API server is ready, then makes
// what the node's static pods need of the API: their mirror pods are
// refused until their RuntimeClass exists.
func (cp *ControlPlane) waitAPIServerServing(ctx context.Context) error {
	if err := cp.WaitAPIServerReady(ctx); err != nil {
		return err
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	if err := EnsureHostRuntimeClass(ctx, client); err != nil {
		return err
	}
	return EnsureHostRuntimeClassPolicy(ctx, client)
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
		// The aggregation layer calls extension API servers
		// (metrics-server) as the requesting user, in headers they trust
		// from its front-proxy certificate alone, as kubeadm sets it up.
		"--requestheader-client-ca-file=" + p.FrontProxyCA.CertPath,
		"--requestheader-allowed-names=" + pki.FrontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.FrontProxyClient.CertPath,
		"--proxy-client-key-file=" + p.FrontProxyClient.KeyPath,
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
	return poll(ctx, p, timeout, readyPoll, func(ctx context.Context) (bool, string) {
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
