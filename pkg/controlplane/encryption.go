package controlplane

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// encryptionFile is the API server's encryption configuration, beside its
// admission configuration (the directory its static pod mounts).
const encryptionFile = "encryption.yaml"

// NewEncryptionConfig is an EncryptionConfiguration that encrypts Secrets
// with a fresh 32-byte secretbox key named key1 (as k3s's
// --secrets-encryption), and still reads Secrets written in the clear.
func NewEncryptionConfig() ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	cfg := apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "EncryptionConfiguration"},
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverv1.ProviderConfiguration{
				{Secretbox: &apiserverv1.SecretboxConfiguration{Keys: []apiserverv1.Key{{Name: "key1", Secret: base64.StdEncoding.EncodeToString(key)}}}},
				{Identity: &apiserverv1.IdentityConfiguration{}},
			},
		}},
	}
	return yaml.Marshal(cfg)
}

// ensureEncryptionConfig keeps the encryption configuration there is (the
// user may have rotated its keys), or writes received (a joining server's,
// from the cluster), or a new one. The file holds keys: 0600.
func (cp *ControlPlane) ensureEncryptionConfig(received []byte) error {
	path := cp.dir.encryptionConfig()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	_, err := os.Stat(path)
	switch {
	case err == nil && received == nil:
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	data := received
	if data == nil {
		if data, err = NewEncryptionConfig(); err != nil {
			return err
		}
		cp.progressf("secrets are encrypted in etcd with a new key (%s)", path)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("encryption configuration: %w", err)
	}
	return nil
}
