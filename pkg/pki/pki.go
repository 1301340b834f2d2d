// Package pki creates, and on later starts reuses, the certificates and keys
// of a steadyplane control plane: a cluster CA for the API server and its
// clients, a separate etcd CA (so that no cluster client certificate can open
// etcd), the service-account signing key pair, and the kubeconfigs made from
// them. Files holding keys are written 0600, and every write is atomic.
//
// Reuse follows one rule: what can be re-derived without losing anything is
// re-derived (a leaf certificate that is missing, unreadable, expiring, signed
// by another CA or lacking a needed name is issued again), and what cannot (a
// CA, the service-account key) is never replaced: a damaged one is an error
// that names the file.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

const (
	// CAValidity is how long a CA created here is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long a certificate issued here is valid, unless
	// Store.Validity says otherwise.
	LeafValidity = 365 * 24 * time.Hour
	// MinValidity is the shortest Store.Validity: a renewal must have time
	// to reach every holder before the old certificate ends.
	MinValidity = time.Minute
	// maxBackdate is how far before its issue a certificate starts, for
	// clocks a little behind the issuer's.
	maxBackdate = 5 * time.Minute

	keyPerm  fs.FileMode = 0o600
	certPerm fs.FileMode = 0o644
)

// Authority is a CA held in memory: its certificate and signing key.
type Authority struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	// CertPath is the file the certificate was loaded from or written to,
	// KeyPath its key's (the controller manager signs CSRs with it).
	CertPath, KeyPath string
}

// CertSpec describes a certificate to issue.
type CertSpec struct {
	// Name is the base of the file names: <Name>.crt and <Name>.key.
	Name         string
	CommonName   string
	Organization []string
	Usages       []x509.ExtKeyUsage
	DNSNames     []string
	IPs          []net.IP
}

// KeyPair is an issued certificate and its key, as PEM and as file paths.
type KeyPair struct {
	CertPath, KeyPath string
	CertPEM, KeyPEM   []byte
}

// Store creates and reuses files in one directory.
type Store struct {
	// Dir is the directory holding the files; it is created 0700.
	Dir string
	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time
	// Validity is how long a leaf certificate issued here is valid; zero
	// means LeafValidity.
	Validity time.Duration
	// Logf reports what was created, reused or renewed, and why; nil is silent.
	Logf func(format string, args ...any)
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (s *Store) path(name string) string { return filepath.Join(s.Dir, name) }

func (s *Store) mkdir() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("creating PKI directory: %w", err)
	}
	return nil
}

// EnsureCA loads the CA <name>.crt/<name>.key, or creates it if neither file
// exists. One file without the other, or a file that does not parse, is an
// error: replacing a CA would silently invalidate everything it signed.
func (s *Store) EnsureCA(name, commonName string) (*Authority, error) {
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	certPath, keyPath := s.path(name+".crt"), s.path(name+".key")
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := parseAuthority(certPEM, keyPEM, certPath, keyPath)
		if err != nil {
			return nil, err
		}
		if s.now().After(ca.Cert.NotAfter) {
			return nil, fmt.Errorf("CA %s expired on %s; it cannot be renewed in place (everything it signed would change): move the PKI directory away to start a new cluster identity", certPath, ca.Cert.NotAfter.Format(time.RFC3339))
		}
		s.logf("reusing CA %s (%s, valid until %s)", certPath, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.DateOnly))
		return ca, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
	case errors.Is(certErr, fs.ErrNotExist) && keyErr == nil:
		// A start stopped between writing the key and the certificate
		// (the key is written first): nothing was signed yet, so the
		// certificate is made again from the key.
		key, err := parseSigner(keyPEM, keyPath)
		if err != nil {
			return nil, fmt.Errorf("CA %s has a key but no certificate, and the key does not parse: %w", name, err)
		}
		cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
		if err != nil {
			return nil, fmt.Errorf("creating CA %s: %w", name, err)
		}
		certPEM = pemCert(cert)
		if err := atomicfile.WriteFile(certPath, certPEM, certPerm); err != nil {
			return nil, err
		}
		s.logf("made the certificate of CA %s again from its key %s (an earlier start stopped between the two)", certPath, keyPath)
		return &Authority{Cert: cert, Key: key, CertPEM: certPEM, CertPath: certPath, KeyPath: keyPath}, nil
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("reading CA certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("reading CA key: %w", keyErr)
	default:
		return nil, fmt.Errorf("CA %s: found %s without its key %s; refusing to create a new CA over it (restore the key, or remove both to start a new cluster identity)", name, certPath, keyPath)
	}

	key, err := newKey()
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", name, err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	certPEM = pemCert(cert)
	// Key first: a crash in between leaves a key without certificate, which
	// the next start reports instead of silently making a second CA.
	if err := atomicfile.WriteFile(keyPath, keyPEM, keyPerm); err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(certPath, certPEM, certPerm); err != nil {
		return nil, err
	}
	s.logf("created CA %s (%s)", certPath, commonName)
	return &Authority{Cert: cert, Key: key, CertPEM: certPEM, CertPath: certPath, KeyPath: keyPath}, nil
}

// ImportCA writes the CA <name>.crt/<name>.key received from the cluster
// this store's control plane joins. A store that holds a CA already must
// hold the same one: a data directory of another cluster is refused, not
// overwritten.
func (s *Store) ImportCA(name string, certPEM, keyPEM []byte) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	certPath, keyPath := s.path(name+".crt"), s.path(name+".key")
	received, err := parseAuthority(certPEM, keyPEM, name+".crt (received)", name+".key (received)")
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(certPath); err == nil {
		certs, err := certutil.ParseCertsPEM(old)
		if err != nil || !certs[0].Equal(received.Cert) {
			return fmt.Errorf("%s holds another CA than the cluster's: this data directory belongs to another cluster (join with a new --data-dir)", certPath)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", certPath, err)
	}
	if err := atomicfile.WriteFile(keyPath, keyPEM, keyPerm); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(certPath, certPEM, certPerm); err != nil {
		return err
	}
	s.logf("CA %s received from the cluster (%s)", certPath, received.Cert.Subject.CommonName)
	return nil
}

// ImportSigningKey writes the service-account signing key <name>.key
// received from the cluster (EnsureSigningKey then derives <name>.pub); a
// different key already there is refused.
func (s *Store) ImportSigningKey(name string, keyPEM []byte) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	if _, err := parseSigner(keyPEM, name+".key (received)"); err != nil {
		return err
	}
	path := s.path(name + ".key")
	if old, err := os.ReadFile(path); err == nil {
		if !bytes.Equal(old, keyPEM) {
			return fmt.Errorf("%s holds another signing key than the cluster's: this data directory belongs to another cluster (join with a new --data-dir)", path)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, keyPEM, keyPerm)
}

func parseAuthority(certPEM, keyPEM []byte, certPath, keyPath string) (*Authority, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certPath, err)
	}
	if !certs[0].IsCA {
		return nil, fmt.Errorf("CA certificate %s is not a CA certificate", certPath)
	}
	signer, err := parseSigner(keyPEM, keyPath)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(certs[0].PublicKey, signer.Public()) {
		return nil, fmt.Errorf("CA key %s does not belong to certificate %s", keyPath, certPath)
	}
	return &Authority{Cert: certs[0], Key: signer, CertPEM: certPEM, CertPath: certPath, KeyPath: keyPath}, nil
}

func parseSigner(keyPEM []byte, keyPath string) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key %s: %T cannot sign", keyPath, k)
	}
	return signer, nil
}

// EnsureCert returns the key pair spec describes, signed by ca. An existing
// pair is kept when it still fits; otherwise it is issued again and the reason
// logged. The key is kept when it still parses, so that renewing a certificate
// does not change the identity of its holder.
func (s *Store) EnsureCert(ca *Authority, spec CertSpec) (*KeyPair, error) {
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	certPath, keyPath := s.path(spec.Name+".crt"), s.path(spec.Name+".key")
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	var key crypto.Signer
	if keyErr == nil {
		if k, err := parseSigner(keyPEM, keyPath); err == nil {
			key = k
		} else {
			s.logf("issuing a new key for %s: %v", spec.Name, err)
		}
	}
	if certErr == nil && key != nil {
		reason := s.unfit(ca, spec, certPEM, key)
		if reason == "" {
			return &KeyPair{CertPath: certPath, KeyPath: keyPath, CertPEM: certPEM, KeyPEM: keyPEM}, nil
		}
		s.logf("issuing %s again: %s", certPath, reason)
	}
	if key == nil {
		k, err := newKey()
		if err != nil {
			return nil, err
		}
		key = k
		if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(k); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(keyPath, keyPEM, keyPerm); err != nil {
			return nil, err
		}
	}
	cert, err := s.sign(ca, spec, key.Public())
	if err != nil {
		return nil, err
	}
	certPEM = pemCert(cert)
	if err := atomicfile.WriteFile(certPath, certPEM, certPerm); err != nil {
		return nil, err
	}
	s.logf("issued %s (CN=%s)", certPath, spec.CommonName)
	return &KeyPair{CertPath: certPath, KeyPath: keyPath, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// unfit says why an existing certificate must be issued again, or "" if it
// can be kept.
func (s *Store) unfit(ca *Authority, spec CertSpec, certPEM []byte, key crypto.Signer) string {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return fmt.Sprintf("unreadable: %v", err)
	}
	c := certs[0]
	switch {
	case !publicKeysEqual(c.PublicKey, key.Public()):
		return "certificate does not match its key"
	case c.CheckSignatureFrom(ca.Cert) != nil:
		return "not signed by " + ca.CertPath
	case !s.now().Before(RenewalTime(c)) && s.notAfter(ca).After(c.NotAfter):
		// Due, and a new one would end later: not once the CA's end
		// caps both, which would renew it over and over for nothing.
		return fmt.Sprintf("two thirds of its lifetime passed (it ends %s)", c.NotAfter.UTC().Format(time.RFC3339))
	case c.NotAfter.Sub(c.NotBefore) > s.validity()+maxBackdate:
		// A shorter validity asked for applies at once, not in months.
		return fmt.Sprintf("valid until %s, longer than the %s asked for", c.NotAfter.UTC().Format(time.RFC3339), s.validity())
	case c.Subject.CommonName != spec.CommonName || !slices.Equal(c.Subject.Organization, spec.Organization):
		return fmt.Sprintf("subject %q differs from the wanted CN=%s O=%v", c.Subject, spec.CommonName, spec.Organization)
	case !slices.Equal(c.ExtKeyUsage, spec.Usages):
		return "key usages differ"
	}
	for _, name := range spec.DNSNames {
		if !slices.Contains(c.DNSNames, name) {
			return "lacks DNS name " + name
		}
	}
	for _, ip := range spec.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return "lacks IP address " + ip.String()
		}
	}
	return ""
}

func (s *Store) sign(ca *Authority, spec CertSpec, pub crypto.PublicKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := s.now()
	notAfter := s.notAfter(ca)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    now.Add(-Backdate(s.validity())).UTC(),
		NotAfter:     notAfter.UTC(),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  spec.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", spec.Name, err)
	}
	return x509.ParseCertificate(der)
}

// notAfter is when a certificate ca issued now ends: its validity later,
// or the CA's end if that comes first.
func (s *Store) notAfter(ca *Authority) time.Time {
	end := s.now().Add(s.validity())
	if end.After(ca.Cert.NotAfter) {
		return ca.Cert.NotAfter
	}
	return end
}

func (s *Store) validity() time.Duration {
	if s.Validity > 0 {
		return s.Validity
	}
	return LeafValidity
}

// Backdate is how long before its issue a certificate valid for validity
// starts, so that a clock a little behind the issuer's accepts it: five
// minutes, or a tenth of a short validity (the renewal time counts from
// the start).
func Backdate(validity time.Duration) time.Duration {
	return min(maxBackdate, validity/10)
}

// RenewalTime is when c is issued again: when two thirds of its lifetime
// have passed, as the kubelet's certificate manager does (it picks a time
// between 70 and 90 %), leaving a third for the renewal to reach every
// holder and for a failed renewal to be retried.
func RenewalTime(c *x509.Certificate) time.Time { return RenewalTimeOf(c, time.Time{}) }

// MinRenewalGap is the least time between a certificate's writing and its
// renewal, whatever its lifetime says: a signer that hands out
// certificates already due never makes a holder ask again and again.
const MinRenewalGap = 10 * time.Second

// RenewalTimeOf is RenewalTime of a certificate written to its file at
// written (zero when not known). Its lifetime counts from the later of
// its start and its writing: a signer may start it well before it was
// issued (the controller manager's, five minutes, even for a certificate
// of a minute), which would make it due at once.
func RenewalTimeOf(c *x509.Certificate, written time.Time) time.Time {
	start := c.NotBefore
	if written.After(start) {
		start = written
	}
	at := start.Add(c.NotAfter.Sub(start) * 2 / 3)
	if !written.IsZero() && at.Before(written.Add(MinRenewalGap)) {
		at = written.Add(MinRenewalGap)
	}
	return at
}

// ReadKeyPair reads a certificate and its key from their files.
func ReadKeyPair(certPath, keyPath string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	return &KeyPair{CertPath: certPath, KeyPath: keyPath, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// EnsureSigningKey loads the key pair <name>.key/<name>.pub used to sign and
// verify service-account tokens, or creates it. A private key that does not
// parse is an error (replacing it would invalidate every token issued); the
// public half is always rewritten from the private one.
func (s *Store) EnsureSigningKey(name string) (privPath, pubPath string, err error) {
	if err := s.mkdir(); err != nil {
		return "", "", err
	}
	privPath, pubPath = s.path(name+".key"), s.path(name+".pub")
	keyPEM, err := os.ReadFile(privPath)
	var key crypto.Signer
	switch {
	case err == nil:
		if key, err = parseSigner(keyPEM, privPath); err != nil {
			return "", "", fmt.Errorf("%w (it signs service-account tokens; restore it, or remove it to invalidate all existing tokens)", err)
		}
	case errors.Is(err, fs.ErrNotExist):
		if key, err = newKey(); err != nil {
			return "", "", err
		}
		if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
			return "", "", err
		}
		if err := atomicfile.WriteFile(privPath, keyPEM, keyPerm); err != nil {
			return "", "", err
		}
		s.logf("created service-account signing key %s", privPath)
	default:
		return "", "", fmt.Errorf("reading %s: %w", privPath, err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	if old, err := os.ReadFile(pubPath); err != nil || !bytes.Equal(old, pubPEM) {
		if err := atomicfile.WriteFile(pubPath, pubPEM, certPerm); err != nil {
			return "", "", err
		}
	}
	return privPath, pubPath, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	return k, nil
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}
