package join

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// workerRenewals counts a running worker's certificate renewals, by
// certificate (client, serving) and result (renewed, failed).
var workerRenewals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "steadyplane_node_certificate_renewals_total",
	Help: "Renewals of a worker's client and serving certificates while it runs, by certificate and result.",
}, []string{"certificate", "result"})

// WorkerCollectors are the metrics of a running worker's renewals.
func WorkerCollectors() []prometheus.Collector { return []prometheus.Collector{workerRenewals} }

// renewRetry is how soon a failed renewal is tried again, at most: a
// third of the lifetime is left for it.
const renewRetry = 15 * time.Second

// KeepRenewed renews the worker's client and serving certificates while
// it runs, each when two thirds of its lifetime have passed, by a
// certificate request made with the node's own credentials (cfg, from the
// kubeconfig Bootstrap wrote). The key is kept and the certificate file
// replaced atomically: client-go and the node API read it again, so
// nothing restarts. It returns when ctx ends.
func (w *Worker) KeepRenewed(ctx context.Context, cfg *rest.Config) {
	ip := net.ParseIP(w.NodeIP)
	pairs := []struct {
		name, base string
		request    certRequest
	}{
		{"client", filepath.Join(w.Dir, workerClient), w.clientRequest()},
		{"serving", filepath.Join(w.Dir, workerServing), w.servingRequest(ip)},
	}
	// A pair whose renewal failed waits renewRetry before its next try,
	// and the other goes on meanwhile: a serving certificate the servers
	// hold back never starves the client certificate.
	retryAt := make([]time.Time, len(pairs))
	for ctx.Err() == nil {
		due := make([]time.Time, len(pairs))
		for i, p := range pairs {
			due[i] = renewalDue(p.base)
			if retryAt[i].After(due[i]) {
				due[i] = retryAt[i]
			}
		}
		i, at := earliest(due)
		if sleepCtx(ctx, time.Until(at)) != nil {
			return
		}
		p := pairs[i]
		if err := w.renewPair(ctx, cfg, p.base, p.request); err != nil {
			workerRenewals.WithLabelValues(p.name, "failed").Inc()
			retryAt[i] = time.Now().Add(renewRetry)
			w.logf("renewing the node's %s certificate %s.crt failed (trying again in %s): %v", p.name, p.base, renewRetry, err)
			continue
		}
		retryAt[i] = time.Time{}
		workerRenewals.WithLabelValues(p.name, "renewed").Inc()
		w.logf("renewed the node's %s certificate %s.crt (next renewal at %s)", p.name, p.base, renewalDue(p.base).Format(time.RFC3339))
	}
}

func (w *Worker) renewPair(ctx context.Context, cfg *rest.Config, base string, r certRequest) error {
	kp, err := readPair(base)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return requestPair(ctx, client, base, kp.KeyPEM, r)
}

// renewalDue is when <base>.crt is renewed (pki.RenewalTimeOf, from when
// it was written): now when it does not read.
func renewalDue(base string) time.Time {
	certs, err := certutil.CertsFromFile(base + ".crt")
	if err != nil {
		return time.Time{}
	}
	var written time.Time
	if fi, err := os.Stat(base + ".crt"); err == nil {
		written = fi.ModTime()
	}
	return pki.RenewalTimeOf(certs[0], written)
}

// earliest is the index and time of the soonest of times.
func earliest(times []time.Time) (int, time.Time) {
	at := 0
	for i, t := range times {
		if t.Before(times[at]) {
			at = i
		}
	}
	return at, times[at]
}
