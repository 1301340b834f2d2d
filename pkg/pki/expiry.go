package pki

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// Expiry is a certificate file as "certs check-expiration" shows it.
type Expiry struct {
	// File is the certificate's path; Subject its common name, Issuer
	// its issuer's.
	File, Subject, Issuer string
	NotAfter              time.Time
	// CA says it is an authority; RenewedBy what renews it.
	CA        bool
	RenewedBy string
}

// Renewer is what keeps a directory's certificates: a server's up, or a
// worker's node agent.
type Renewer string

const (
	// ByServer: the certificates in a server's <data-dir>/pki.
	ByServer Renewer = "server"
	// ByWorker: those in a worker's <root-dir>/bootstrap.
	ByWorker Renewer = "worker"
)

// RenewedBy says what renews a certificate of a directory kept by r.
func RenewedBy(r Renewer, ca bool) string {
	switch {
	case ca && r == ByWorker:
		return "a copy of the cluster CA, read at each start"
	case ca:
		return fmt.Sprintf("nothing: a CA is valid %d years; a new one is a new cluster identity (docs/certificates.md)", int(CAValidity.Hours()/24/365))
	case r == ByWorker:
		return "node, while it runs, at 2/3 of its lifetime (a certificate request the servers approve)"
	}
	return "up, while it runs, at 2/3 of its lifetime"
}

// CredentialsDir is the directory of a server's data directory that holds
// one directory per component: its kubeconfig, client certificate and key,
// and nothing else, so that its pod mounts only its own.
const CredentialsDir = "credentials"

// Expiries reads every certificate (*.crt) in dirs, kept by r, sorted by
// expiry, soonest first.
func Expiries(r Renewer, dirs ...string) ([]Expiry, error) {
	var files []string
	for _, dir := range dirs {
		found, err := filepath.Glob(filepath.Join(dir, "*.crt"))
		if err != nil {
			return nil, err
		}
		files = append(files, found...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no certificate", strings.Join(dirs, ", "))
	}
	var out []Expiry
	for _, f := range files {
		certs, err := certutil.CertsFromFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		c := certs[0]
		out = append(out, Expiry{File: f, Subject: c.Subject.CommonName, Issuer: c.Issuer.CommonName, NotAfter: c.NotAfter, CA: c.IsCA,
			RenewedBy: RenewedBy(r, c.IsCA)})
	}
	slices.SortStableFunc(out, func(a, b Expiry) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, nil
}

// Left says how long until e expires at now, in days (or "expired").
func (e Expiry) Left(now time.Time) string {
	d := e.NotAfter.Sub(now)
	switch {
	case d <= 0:
		return "expired"
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// ExpiriesOfDir is Expiries of a server's data directory (pki/) or a
// worker's root directory (bootstrap/), whichever dir is.
func ExpiriesOfDir(dir string) ([]Expiry, error) {
	if _, err := os.Stat(filepath.Join(dir, "pki")); err == nil {
		components, err := filepath.Glob(filepath.Join(dir, CredentialsDir, "*"))
		if err != nil {
			return nil, err
		}
		return Expiries(ByServer, append([]string{filepath.Join(dir, "pki")}, components...)...)
	}
	if _, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil {
		return Expiries(ByWorker, filepath.Join(dir, "bootstrap"))
	}
	return nil, fmt.Errorf("%s is neither a server's data directory (pki/) nor a worker's root directory (bootstrap/)", dir)
}
