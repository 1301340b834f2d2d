package join

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/steadyplane/steadyplane/pkg/pki"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// TokenKind is what a join token lets its holder become.
type TokenKind string

const (
	// ServerToken joins servers: the servers seal the cluster's keys for it.
	ServerToken TokenKind = "server"
	// WorkerToken joins workers: it asks for a new node's certificates
	// and opens nothing.
	WorkerToken TokenKind = "worker"
	// OtherToken is a bootstrap token steadyplane did not make.
	OtherToken TokenKind = "other"
)

// TokenKindLabel on a bootstrap token's Secret says its TokenKind: the
// servers seal the join data for every token labelled server.
const TokenKindLabel = "join.steadyplane.io/kind"

// DefaultTokenTTL is how long the tokens up and "token create" make are
// valid unless told otherwise (kubeadm's default).
const DefaultTokenTTL = 24 * time.Hour

// TokenInfo is a join token as the cluster keeps it.
type TokenInfo struct {
	// Token is the whole join token, as --token takes it.
	Token Token
	Kind  TokenKind
	// Expires is when the API server stops accepting it; zero for never.
	Expires     time.Time
	Description string
	// Sealed says whether the join data of a server token is published.
	Sealed bool
}

// NewTokenSecret is the bootstrap token Secret of a kind's join token t,
// which expires ttl after now (never when ttl is 0).
func NewTokenSecret(t Token, kind TokenKind, ttl time.Duration, now time.Time, description string) *corev1.Secret {
	labels := maps.Clone(rbacutil.ManagedBy)
	labels[TokenKindLabel] = string(kind)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(t.ID), Namespace: metav1.NamespaceSystem, Labels: labels},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               t.ID,
			bootstrapapi.BootstrapTokenSecretKey:           t.Secret,
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenUsageSigningKey:     "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      JoinGroup,
			bootstrapapi.BootstrapTokenDescriptionKey:      description,
		},
	}
	if ttl > 0 {
		s.StringData[bootstrapapi.BootstrapTokenExpirationKey] = now.Add(ttl).UTC().Format(time.RFC3339)
	}
	return s
}

// CreateToken makes a join token of kind pinning ca, valid for ttl (0:
// never), and publishes its bootstrap token Secret. A server token is
// of no use until a server sealed the join data for it (RunBundleSealer,
// or Publisher.Publish at a cluster's first start; WaitSealed).
func CreateToken(ctx context.Context, client kubernetes.Interface, ca *x509.Certificate, kind TokenKind, ttl time.Duration, description string) (Token, *corev1.Secret, error) {
	if kind != ServerToken && kind != WorkerToken {
		return Token{}, nil, fmt.Errorf("a join token is for a server or a worker, not %q", kind)
	}
	if ttl < 0 {
		return Token{}, nil, fmt.Errorf("a token's time to live is 0 (never expires) or more, not %v", ttl)
	}
	t, err := NewToken(ca)
	if err != nil {
		return Token{}, nil, err
	}
	if description == "" {
		description = fmt.Sprintf("steadyplane: joins a %s", kind)
	}
	s, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, NewTokenSecret(t, kind, ttl, time.Now(), description), metav1.CreateOptions{})
	if err != nil {
		return Token{}, nil, fmt.Errorf("publishing the %s token: %w", kind, err)
	}
	return t, s, nil
}

// WaitSealed waits until the join data of server token id is published,
// at most timeout.
func WaitSealed(ctx context.Context, client kubernetes.Interface, id string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, BundleSecretName(id), metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no server sealed the join data for token %s within %v: is up running on a server of this cluster?", id, timeout)
	}
	return nil
}

// TokenAlive says whether the cluster still accepts join token t (its
// Secret is there and has not expired: the controller manager deletes an
// expired one soon after), and when it expires (zero: never).
func TokenAlive(ctx context.Context, client kubernetes.Interface, t Token, now time.Time) (bool, time.Time, error) {
	s, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, bootstraputil.BootstrapTokenSecretName(t.ID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, err
	}
	info, ok := tokenInfo(s, nil)
	return ok && info.Token.Secret == t.Secret && !info.Expired(now), info.Expires, nil
}

// Expired says whether the token's expiration has passed at now.
func (i TokenInfo) Expired(now time.Time) bool { return !i.Expires.IsZero() && !now.Before(i.Expires) }

// ListTokens are the cluster's bootstrap tokens, its join tokens first,
// each pinning ca.
func ListTokens(ctx context.Context, client kubernetes.Interface, ca *x509.Certificate) ([]TokenInfo, error) {
	secrets, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(bootstrapapi.SecretTypeBootstrapToken)})
	if err != nil {
		return nil, fmt.Errorf("listing the bootstrap tokens: %w", err)
	}
	bundles, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the join data: %w", err)
	}
	sealed := map[string]bool{}
	for _, b := range bundles.Items {
		if id, ok := strings.CutPrefix(b.Name, BundleSecretPrefix); ok && len(b.Data[BundleKey]) > 0 {
			sealed[id] = true
		}
	}
	pin := Token{}
	if ca != nil {
		pin, _ = NewToken(ca)
	}
	var out []TokenInfo
	for i := range secrets.Items {
		info, ok := tokenInfo(&secrets.Items[i], sealed)
		if !ok {
			continue
		}
		info.Token.CAHash = pin.CAHash
		out = append(out, info)
	}
	order := map[TokenKind]int{ServerToken: 0, WorkerToken: 1, OtherToken: 2}
	slices.SortStableFunc(out, func(a, b TokenInfo) int {
		if d := order[a.Kind] - order[b.Kind]; d != 0 {
			return d
		}
		return strings.Compare(a.Token.ID, b.Token.ID)
	})
	return out, nil
}

// tokenInfo reads a bootstrap token Secret; sealed are the token IDs
// with published join data (nil: not known). A token of an earlier
// release has no kind label: its join data says it is a server's.
func tokenInfo(s *corev1.Secret, sealed map[string]bool) (TokenInfo, bool) {
	id, secret := string(s.Data[bootstrapapi.BootstrapTokenIDKey]), string(s.Data[bootstrapapi.BootstrapTokenSecretKey])
	if !bootstraputil.IsValidBootstrapToken(bootstraputil.TokenFromIDAndSecret(id, secret)) {
		return TokenInfo{}, false
	}
	info := TokenInfo{Token: Token{ID: id, Secret: secret}, Description: string(s.Data[bootstrapapi.BootstrapTokenDescriptionKey]), Sealed: sealed[id]}
	if exp := string(s.Data[bootstrapapi.BootstrapTokenExpirationKey]); exp != "" {
		if t, err := time.Parse(time.RFC3339, exp); err == nil {
			info.Expires = t
		} else {
			info.Expires = time.Unix(0, 0) // unreadable: the API server refuses it
		}
	}
	switch kind := TokenKind(s.Labels[TokenKindLabel]); {
	case kind == ServerToken || kind == WorkerToken:
		info.Kind = kind
	case !slices.Contains(strings.Split(string(s.Data[bootstrapapi.BootstrapTokenExtraGroupsKey]), ","), JoinGroup):
		info.Kind = OtherToken
	case sealed[id]:
		info.Kind = ServerToken
	default:
		info.Kind = WorkerToken
	}
	return info, true
}

// ErrNoSuchToken says a token to delete is not there.
var ErrNoSuchToken = errors.New("no such bootstrap token")

// DeleteToken revokes the bootstrap token id (an ID, or a whole token)
// and returns its ID:
// its Secret is deleted, and with it (garbage collection of what it
// owns, and DeleteToken for tokens of an earlier release) the join data
// sealed for it and the role that let it read that.
func DeleteToken(ctx context.Context, client kubernetes.Interface, id string) (string, error) {
	if t, err := ParseToken(id); err == nil {
		id = t.ID
	} else if before, _, ok := strings.Cut(id, "."); ok {
		id = before
	}
	if !bootstraputil.IsValidBootstrapTokenID(id) {
		return "", fmt.Errorf("%q is no token ID (6 of a-z0-9; steadyplane token list shows them)", id)
	}
	api := client.CoreV1().Secrets(metav1.NamespaceSystem)
	err := api.Delete(ctx, bootstraputil.BootstrapTokenSecretName(id), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return id, fmt.Errorf("%w: %s", ErrNoSuchToken, id)
	}
	if err != nil {
		return id, fmt.Errorf("deleting token %s: %w", id, err)
	}
	// Objects of an earlier release have no owner: delete them here.
	if err := api.Delete(ctx, BundleSecretName(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return id, fmt.Errorf("deleting token %s's join data: %w", id, err)
	}
	if err := client.RbacV1().RoleBindings(metav1.NamespaceSystem).Delete(ctx, tokenRole(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return id, fmt.Errorf("deleting token %s's role binding: %w", id, err)
	}
	if err := client.RbacV1().Roles(metav1.NamespaceSystem).Delete(ctx, tokenRole(id), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return id, fmt.Errorf("deleting token %s's role: %w", id, err)
	}
	return id, nil
}

// ServerCA is the cluster CA of a server's data directory: what its join
// tokens pin.
func ServerCA(dataDir string) (*x509.Certificate, error) {
	path := filepath.Join(dataDir, "pki", pki.CAName+".crt")
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s is not a server's data directory: %w", dataDir, err)
	}
	return certs[0], nil
}

// TokenClient is an admin client and the cluster CA of a server's data
// directory, for the token commands.
func TokenClient(dataDir string) (kubernetes.Interface, *x509.Certificate, error) {
	ca, err := ServerCA(dataDir)
	if err != nil {
		return nil, nil, err
	}
	client, err := AdminClient(dataDir)
	return client, ca, err
}
