// Package join is how a cluster grows and shrinks: another host becomes a
// server (up --server) or a worker (node --server) of a cluster "up" made,
// with one token, and leaves it (remove-node).
//
// The token pins the cluster CA (the joining side checks the CA it is sent
// against the token's hash, as kubeadm's --discovery-token-ca-cert-hash
// and k3s's K10 tokens do) and carries a bootstrap token the API server
// authenticates (token.go, discover.go). What a server needs and cannot
// make itself (the CAs' keys, the service-account key, the cluster's
// ranges) reaches it sealed with a key only the token gives (bundle.go,
// publish.go, server.go); its etcd member joins as a learner and is
// promoted once caught up (membership.go, member.go). A worker asks for
// its node's certificates instead (worker.go, approve.go). What a data
// directory knows of its cluster is its State (state.go).
package join

import (
	"crypto/x509"
	"fmt"
	"strings"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"k8s.io/kubernetes/cmd/kubeadm/app/util/pubkeypin"
)

// TokenPrefix starts every join token; the digit is its format's version.
const TokenPrefix = "SP1"

// Token is a parsed join token: SP1<sha256 of the CA's public key, hex>::<id>.<secret>.
type Token struct {
	// CAHash is the pin of the cluster CA's public key, "sha256:<hex>"
	// (kubeadm's format).
	CAHash string
	// ID and Secret are a bootstrap token's two halves: the API server
	// authenticates "<id>.<secret>" as system:bootstrap:<id>.
	ID, Secret string
}

// NewToken makes a token for the cluster whose CA is ca, with a fresh
// random bootstrap token.
func NewToken(ca *x509.Certificate) (Token, error) {
	bt, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, err
	}
	id, secret, _ := strings.Cut(bt, ".")
	return Token{CAHash: pubkeypin.Hash(ca), ID: id, Secret: secret}, nil
}

// ParseToken reads a token as "up" prints it; surrounding white space (a
// token file's newline) is ignored. Errors never repeat the secret.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, TokenPrefix) {
		return Token{}, fmt.Errorf("join token: does not start with %q (it is the content of the first server's <data-dir>/token)", TokenPrefix)
	}
	hash, bt, ok := strings.Cut(strings.TrimPrefix(s, TokenPrefix), "::")
	if !ok {
		return Token{}, fmt.Errorf("join token: no \"::\" between the CA hash and the bootstrap token")
	}
	pin := "sha256:" + strings.ToLower(hash)
	if err := pubkeypin.NewSet().Allow(pin); err != nil || len(hash) != 64 {
		return Token{}, fmt.Errorf("join token: the CA hash is not 64 hex digits (sha256)")
	}
	if !bootstraputil.IsValidBootstrapToken(bt) {
		return Token{}, fmt.Errorf("join token: the part after \"::\" is not a bootstrap token (<6 of a-z0-9>.<16 of a-z0-9>)")
	}
	id, secret, _ := strings.Cut(bt, ".")
	return Token{CAHash: pin, ID: id, Secret: secret}, nil
}

// String is the token as a user passes it to --token.
func (t Token) String() string {
	return TokenPrefix + strings.TrimPrefix(t.CAHash, "sha256:") + "::" + t.Bootstrap()
}

// Bootstrap is the bearer token the API server authenticates.
func (t Token) Bootstrap() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// User is the user the API server authenticates the token as.
func (t Token) User() string { return bootstrapapi.BootstrapUserPrefix + t.ID }

// CheckCA says whether ca is the CA the token pins.
func (t Token) CheckCA(ca *x509.Certificate) error {
	if _, err := t.Pinned([]*x509.Certificate{ca}); err != nil {
		return err
	}
	return nil
}

// Pinned are the certificates of cas whose public key is the one the token
// pins: only these may be trusted (a bundle may carry others, which anyone
// could have added).
func (t Token) Pinned(cas []*x509.Certificate) ([]*x509.Certificate, error) {
	set := pubkeypin.NewSet()
	if err := set.Allow(t.CAHash); err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, c := range cas {
		if set.CheckAny([]*x509.Certificate{c}) == nil {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the server's CA is not the one the join token pins (%s)", t.CAHash)
	}
	return out, nil
}
