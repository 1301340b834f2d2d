// Package testpki makes the certificates tests of TLS clients need. It imports
// nothing of steadyplane but pkg/pki, so that any package's tests may use it.
package testpki

import (
	"testing"

	"github.com/steadyplane/steadyplane/pkg/pki"
)

// TestPKI is what tests of TLS clients need: a store to issue certificates
// from, the CA the client trusts, and an impostor CA it does not.
type TestPKI struct {
	Store    *pki.Store
	CA       *pki.Authority
	Impostor *pki.Authority
}

// New creates a TestPKI in a temporary directory of t.
func New(t testing.TB) *TestPKI {
	t.Helper()
	st := &pki.Store{Dir: t.TempDir()}
	ca, err := st.EnsureCA("ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	imp, err := st.EnsureCA("impostor-ca", "impostor")
	if err != nil {
		t.Fatal(err)
	}
	return &TestPKI{Store: st, CA: ca, Impostor: imp}
}
