package join

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// Where a server keeps its tokens in its data directory (0600).
const (
	// TokenFile is the server join token: the first server's own, a
	// joined server's the one it joined with.
	TokenFile = "token"
	// NodeTokenFile is the token for worker nodes: it asks for node
	// credentials and cannot open the cluster's keys.
	NodeTokenFile = "node-token"
)

// ReadToken is the join token of the flags --token and --token-file, of
// which exactly one is given.
func ReadToken(token, tokenFile string) (Token, error) {
	if (token == "") == (tokenFile == "") {
		return Token{}, errors.New("--server needs exactly one of --token and --token-file")
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return Token{}, fmt.Errorf("--token-file: %w", err)
		}
		token = string(b)
	}
	return ParseToken(token)
}

// writeTokenFile keeps t at path, 0600.
func writeTokenFile(path string, t Token) error {
	return atomicfile.WriteFile(path, []byte(t.String()+"\n"), 0o600)
}

// EnsureTokenFile reads the join token kept at path (0600), or makes one
// pinning ca; a token that pins another CA is an error.
func EnsureTokenFile(path string, ca *x509.Certificate) (Token, error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok, err := ParseToken(string(raw))
		if err != nil {
			return Token{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := tok.CheckCA(ca); err != nil {
			return Token{}, fmt.Errorf("%s: %w", path, err)
		}
		return tok, nil
	case os.IsNotExist(err):
		tok, err := NewToken(ca)
		if err != nil {
			return Token{}, err
		}
		return tok, writeTokenFile(path, tok)
	default:
		return Token{}, err
	}
}
