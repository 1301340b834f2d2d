package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/pkg/node/agent"
	"github.com/steadyplane/steadyplane/pkg/pki"
)

// issuedCert is a certificate up issued beside the cluster's own
// (pki.EnsureCluster's), which it keeps renewed while it runs.
type issuedCert struct {
	dir  string
	ca   *pki.Authority
	spec pki.CertSpec
}

// issuedCerts are those of this run, by certificate file.
type issuedCerts struct {
	mu    sync.Mutex
	certs map[string]issuedCert
}

func (c *issuedCerts) add(path string, ic issuedCert) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.certs == nil {
		c.certs = map[string]issuedCert{}
	}
	c.certs[path] = ic
}

func (c *issuedCerts) all() []issuedCert {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]issuedCert, 0, len(c.certs))
	for _, ic := range c.certs {
		out = append(out, ic)
	}
	slices.SortFunc(out, func(a, b issuedCert) int { return strings.Compare(a.dir+a.spec.Name, b.dir+b.spec.Name) })
	return out
}

// migrateLegacyCredentials removes what a release before credentials/
// kept of component name: its certificate and key in pki/ (nothing
// renews them) and its kubeconfig beside the data directory, which held
// them. The startup monitor's stays, holding its certificate kp: the
// revisions of the API server installed before name it.
func (cp *ControlPlane) migrateLegacyCredentials(name string, kp *pki.KeyPair) error {
	for _, ext := range []string{".crt", ".key"} {
		if err := os.Remove(filepath.Join(cp.dir.pkiDir(), name+ext)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	legacy := cp.dir.legacyKubeconfig(name)
	if name != startupMonitor {
		if err := os.Remove(legacy); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	return holdPair(legacy, kp)
}

// holdPair writes the kubeconfig at path again, if it exists, with its
// user holding kp.
func holdPair(path string, kp *pki.KeyPair) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, u := range cfg.AuthInfos {
		u.ClientCertificate, u.ClientKey = "", ""
		u.ClientCertificateData, u.ClientKeyData = kp.CertPEM, kp.KeyPEM
	}
	return pki.WriteKubeconfigFile(path, cfg)
}

// issue issues (or keeps) the certificate spec in dir, signed by ca, and
// keeps it renewed while up runs.
func (cp *ControlPlane) issue(dir string, ca *pki.Authority, spec pki.CertSpec) (*pki.KeyPair, error) {
	kp, err := cp.storeIn(dir).EnsureCert(ca, spec)
	if err != nil {
		return nil, err
	}
	cp.issued.add(kp.CertPath, issuedCert{dir: dir, ca: ca, spec: spec})
	return kp, nil
}

var (
	certRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steadyplane_certificate_renewals_total",
		Help: "Renewals of the server's certificates while up runs, by certificate (file name) and result (renewed, failed).",
	}, []string{"certificate", "result"})
	certExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "steadyplane_certificate_expiration_timestamp_seconds",
		Help: "When each of the server's leaf certificates expires (Unix seconds), by certificate (file name).",
	}, []string{"certificate"})
)

// renewRetry is how soon a failed renewal pass is tried again, at most.
const renewRetry = 30 * time.Second

// keepCertificatesRenewed renews every leaf certificate up keeps (the
// cluster's in pki/, each component's in credentials/) when two thirds of
// its lifetime have passed, until ctx ends. Nothing restarts: each
// holder reads the new file (the API server and etcd their serving and
// client certificates, client-go the files a kubeconfig names, the node
// API and the webhook through pki.ServingPair), and the key is kept, so
// a certificate file replaced atomically is the whole change. The admin
// kubeconfig, which holds its certificate, is written again. Each
// renewal is a log line, a metric and an Event on the server's Node
// (CertificateRenewed, or Warning CertificateRenewalFailed).
func (cp *ControlPlane) keepCertificatesRenewed(ctx context.Context) {
	agent.RegisterMetrics(certRenewals, certExpiry)
	recorder, node, stop := cp.nodeEvents(ctx, "steadyplane-certificates")
	defer stop()
	for {
		renewed, next, err := cp.renewCertificates()
		for _, f := range renewed {
			certRenewals.WithLabelValues(filepath.Base(f), "renewed").Inc()
			recorder.Eventf(node, corev1.EventTypeNormal, "CertificateRenewed", "renewed %s", f)
		}
		if len(renewed) > 0 {
			cp.progressf("certificates: renewed %d (%s); next renewal at %s", len(renewed), strings.Join(baseNames(renewed), ", "), next.UTC().Format(time.RFC3339))
		}
		if err != nil {
			certRenewals.WithLabelValues("", "failed").Inc()
			cp.progressf("certificates: renewal failed (tried again in %v): %v", renewRetry, err)
			recorder.Eventf(node, corev1.EventTypeWarning, "CertificateRenewalFailed", "%v", err)
			next = time.Now().Add(renewRetry)
		}
		timer := time.NewTimer(max(time.Until(next), pki.MinRenewalGap))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// renewCertificates is one pass: every certificate due is issued again.
// It returns the files renewed and the earliest next renewal.
func (cp *ControlPlane) renewCertificates() (renewed []string, next time.Time, err error) {
	before := map[string][]byte{}
	read := func(kp *pki.KeyPair) {
		if kp != nil {
			before[kp.CertPath], _ = os.ReadFile(kp.CertPath)
		}
	}
	cluster := []*pki.KeyPair{cp.pki.APIServer, cp.pki.APIServerEtcdClient, cp.pki.APIServerKubeletClient, cp.pki.EtcdServer, cp.pki.Admin, cp.pki.FrontProxyClient}
	for _, kp := range cluster {
		read(kp)
	}
	issued := cp.issued.all()
	for _, ic := range issued {
		before[filepath.Join(ic.dir, ic.spec.Name+".crt")], _ = os.ReadFile(filepath.Join(ic.dir, ic.spec.Name+".crt"))
	}
	// One summary line for the pass (keepCertificatesRenewed), not the
	// store's line per certificate kept or issued.
	quiet := func(dir string) *pki.Store {
		s := cp.storeIn(dir)
		s.Logf = nil
		return s
	}
	var errs []string
	c, err := quiet(cp.dir.pkiDir()).EnsureCluster(cp.pkiConfig)
	if err != nil {
		errs = append(errs, err.Error())
	} else if !bytes.Equal(before[c.Admin.CertPath], c.Admin.CertPEM) {
		select {
		case cp.adminRenewed <- struct{}{}:
		default: // one is pending already
		}
	}
	for _, ic := range issued {
		kp, err := quiet(ic.dir).EnsureCert(ic.ca, ic.spec)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if ic.spec.Name == startupMonitor && !bytes.Equal(before[kp.CertPath], kp.CertPEM) {
			if err := holdPair(cp.dir.legacyKubeconfig(startupMonitor), kp); err != nil {
				errs = append(errs, err.Error())
			}
		}

	}
	// metrics-server's pod reads its certificate from a Secret, which holds
	// whichever server's was written first: every pass looks, and the
	// pass after the Secret's is due comes in time, whoever wrote it.
	var metricsDue time.Time
	if cp.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		metricsDue, err = cp.publishMetricsCert(ctx)
		cancel()
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	now := time.Now()
	var capped []string
	for _, f := range slices.Sorted(maps.Keys(before)) {
		pem, rerr := os.ReadFile(f)
		if rerr != nil {
			continue
		}
		if !bytes.Equal(pem, before[f]) {
			renewed = append(renewed, f)
		}
		certs, perr := certutil.ParseCertsPEM(pem)
		if perr != nil {
			continue
		}
		certExpiry.WithLabelValues(filepath.Base(f)).Set(float64(certs[0].NotAfter.Unix()))
		at := pki.RenewalTime(certs[0])
		if !at.After(now) {
			// Due and kept: it ends with its CA, or its renewal failed
			// (the error says so).
			capped = append(capped, filepath.Base(f)+" (ends "+certs[0].NotAfter.UTC().Format(time.DateOnly)+")")
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if metricsDue.After(now) && (next.IsZero() || metricsDue.Before(next)) {
		next = metricsDue
	}
	if len(capped) > 0 && len(errs) == 0 {
		cp.progressf("certificates: %s cannot be renewed past the end of the CA that signs them: rotate the CA (docs/certificates.md)", strings.Join(capped, ", "))
	}
	if next.IsZero() || next.After(now.Add(time.Hour)) && len(capped) > 0 {
		next = now.Add(time.Hour) // the warning, hourly
	}
	if len(errs) > 0 {
		return renewed, next, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return renewed, next, nil
}

func baseNames(files []string) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = filepath.Base(f)
	}
	return out
}
