package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
)

// TestEncryptionConfigLoads checks the file up writes with the API
// server's own loader: Secrets get a secretbox transformer.
func TestEncryptionConfigLoads(t *testing.T) {
	data, err := NewEncryptionConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), encryptionFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "test")
	if err != nil {
		t.Fatalf("the API server refuses the configuration: %v\n%s", err, data)
	}
	if _, ok := cfg.Transformers[schema.GroupResource{Resource: "secrets"}]; !ok {
		t.Errorf("no transformer for secrets: %v", cfg.Transformers)
	}
	other, _ := NewEncryptionConfig()
	if string(other) == string(data) {
		t.Error("two configurations have the same key")
	}
}

func TestEncryptionConfigKept(t *testing.T) {
	cp := prepared(t, func(*Options) {})
	path := cp.dir.encryptionConfig()
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want 0600", path, fi.Mode().Perm())
	}
	// A rotated file (the user's) is kept by the next start.
	rotated := append([]byte("# rotated\n"), first...)
	if err := os.WriteFile(path, rotated, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp.ensureEncryptionConfig(nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(rotated) {
		t.Error("the next start replaced the encryption configuration")
	}
	found := false
	for _, a := range cp.APIServer.Args {
		found = found || a == "--encryption-provider-config="+path
	}
	if !found {
		t.Errorf("API server args lack --encryption-provider-config=%s", path)
	}
}
