package pki

import (
	"bytes"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestServingPairFollowsRenewals: a renewed certificate is served at the
// next handshake after a second, and a torn file keeps the last good one.
func TestServingPairFollowsRenewals(t *testing.T) {
	s := newStore(t)
	now := time.Now()
	s.Now = func() time.Time { return now }
	s.Validity = time.Hour
	ca, err := s.EnsureCA(CAName, "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	spec := CertSpec{Name: "serving", CommonName: "serving", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	first, err := s.EnsureCert(ca, spec)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := LoadServingPair(first.CertPath, first.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		c, err := pair.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	original := served()
	now = now.Add(50 * time.Minute) // past two thirds: issued again
	second, err := s.EnsureCert(ca, spec)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.CertPEM, second.CertPEM) {
		t.Fatal("not renewed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for bytes.Equal(served(), original) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	renewed := served()
	if bytes.Equal(renewed, original) {
		t.Fatal("the renewed certificate is not served 5 s after it was written")
	}
	if err := os.WriteFile(second.CertPath, []byte("-----BEGIN CERTIFICATE-----\ntorn"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if !bytes.Equal(served(), renewed) {
		t.Error("a torn certificate file replaced the one served")
	}
	if _, err := LoadServingPair(second.CertPath, second.KeyPath); err == nil {
		t.Error("a torn certificate file loads at start")
	}
}
