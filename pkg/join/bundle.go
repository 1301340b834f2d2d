package join

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	kubeadmcrypto "k8s.io/kubernetes/cmd/kubeadm/app/util/crypto"
)

// Bundle is what a joining server receives and cannot make itself: the
// keys every server must share, and the cluster's ranges, which must not
// differ between servers.
type Bundle struct {
	// CACert and CAKey are the cluster CA; EtcdCACert and EtcdCAKey the
	// etcd CA; ServiceAccountKey signs service-account tokens (PEM).
	CACert, CAKey, EtcdCACert, EtcdCAKey, ServiceAccountKey []byte
	// KubeletCACert and KubeletCAKey sign node serving certificates.
	KubeletCACert, KubeletCAKey []byte
	// ServiceCIDR, ClusterCIDR (pods, split per node by NodeCIDRMaskSize)
	// and ClusterDomain are the cluster's.
	ServiceCIDR, ClusterCIDR, ClusterDomain string
	NodeCIDRMaskSize                        int
	// EtcdClientPort is where the servers' etcd members serve clients.
	EtcdClientPort int
	// ReadinessWebhookPort is where every server's readiness-gate webhook
	// listens on 127.0.0.1: the webhook configuration, which all API
	// servers share, names one port. 0 from a server of an earlier release.
	ReadinessWebhookPort int
	// EncryptionConfig is the API servers' EncryptionConfiguration: the
	// keys Secrets are encrypted with in etcd, which every server needs.
	EncryptionConfig []byte
	// FrontProxyCACert and FrontProxyCAKey sign the aggregation layer's
	// client certificate: every server's is of one CA, as extension API
	// servers expect. Empty from a server of an earlier release (the
	// joining server then makes its own; the API servers publish the
	// union of their CAs).
	FrontProxyCACert, FrontProxyCAKey []byte `json:",omitempty"`
	// AdmissionConfig is the API servers' admission configuration (Pod
	// Security): the level the cluster enforces, which a joining server
	// takes. Empty from a server of an earlier release.
	AdmissionConfig []byte `json:",omitempty"`
}

// bundleKeyInfo binds the derived key to its one use.
const bundleKeyInfo = "steadyplane join bundle v1"

// bundleKey derives the sealing key from the token's secret: only a
// holder of the token can open the bundle, also one who can read the
// Secret it is kept in.
func bundleKey(t Token) ([]byte, error) {
	return hkdf.Key(sha256.New, []byte(t.Secret), []byte(t.ID), bundleKeyInfo, 32)
}

// Seal encrypts b for holders of t (AES-256-GCM, as kubeadm's
// --certificate-key bundle).
func Seal(b *Bundle, t Token) ([]byte, error) {
	plain, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	key, err := bundleKey(t)
	if err != nil {
		return nil, err
	}
	return kubeadmcrypto.EncryptBytes(plain, key)
}

// ErrBundleSeal says the join data did not open with the token.
var ErrBundleSeal = errors.New("the cluster's join data does not open with this token's secret (the token was changed, or the data damaged)")

// Open decrypts and checks what Seal made.
func Open(sealed []byte, t Token) (*Bundle, error) {
	key, err := bundleKey(t)
	if err != nil {
		return nil, err
	}
	plain, err := kubeadmcrypto.DecryptBytes(sealed, key)
	if err != nil {
		return nil, ErrBundleSeal
	}
	var b Bundle
	if err := json.Unmarshal(plain, &b); err != nil {
		return nil, fmt.Errorf("join data: %w", err)
	}
	if len(b.CACert) == 0 || len(b.CAKey) == 0 || len(b.EtcdCACert) == 0 || len(b.EtcdCAKey) == 0 || len(b.KubeletCACert) == 0 || len(b.KubeletCAKey) == 0 || len(b.ServiceAccountKey) == 0 {
		return nil, errors.New("join data: a CA or the service-account key is missing")
	}
	if b.ServiceCIDR == "" || b.ClusterCIDR == "" || b.ClusterDomain == "" || b.NodeCIDRMaskSize == 0 || b.EtcdClientPort == 0 {
		return nil, errors.New("join data: the cluster's ranges, domain or etcd port are missing")
	}
	return &b, nil
}
