package join

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcclient"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

const (
	// BundleSecretPrefix names the Secret in kube-system holding a token's
	// sealed Bundle: steadyplane-join-<token id>.
	BundleSecretPrefix = "steadyplane-join-"
	// BundleKey is the Secret's data key.
	BundleKey = "bundle"
	// JoinGroup is the group the join token's user is in besides
	// system:bootstrappers.
	JoinGroup = "system:bootstrappers:steadyplane"
	// clusterInfoRole lets anyone read kube-public/cluster-info, the CA a
	// joining host checks against its token (kubeadm grants the same).
	clusterInfoRole = "steadyplane:cluster-info"
)

// BundleSecretName is the Secret holding the sealed bundle of token id.
func BundleSecretName(id string) string { return BundleSecretPrefix + id }

// tokenRole is the Role that lets token id read its own bundle and nothing else.
func tokenRole(id string) string { return "steadyplane:join:" + id }

// Publish makes the API objects a joining host uses, with an admin client:
// the bootstrap token (kube-system/bootstrap-token-<id>; expires at expires
// unless zero), the bundle sealed for it, a Role that lets the token's user
// read that one Secret, and kube-public/cluster-info (the CA and serverURL)
// readable without credentials, with the API servers (host:port) a
// joining host should know. Existing objects are brought up to date.
func Publish(ctx context.Context, client kubernetes.Interface, t Token, sealed []byte, caPEM []byte, serverURL string, servers []string, expires time.Time) error {
	if err := PublishToken(ctx, client, t, expires, "steadyplane up: joins servers (up --server) and nodes (node --server)"); err != nil {
		return err
	}
	bundle := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: BundleSecretName(t.ID), Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{BundleKey: sealed},
	}
	if err := applySecret(ctx, client, bundle); err != nil {
		return err
	}
	if err := PublishServers(ctx, client, caPEM, serverURL, servers); err != nil {
		return err
	}
	return rbacutil.Ensure(ctx, client,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: tokenRole(t.ID), Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{BundleSecretName(t.ID)}}}},
		rbacutil.UserBinding(tokenRole(t.ID), metav1.NamespaceSystem, t.User()),
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRole, Namespace: metav1.NamespacePublic, Labels: rbacutil.ManagedBy},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo}}}},
		rbacutil.UserBinding(clusterInfoRole, metav1.NamespacePublic, "system:anonymous"),
		// A worker node (steadyplane node --server) asks for its client
		// certificate with a token, which the controller manager
		// approves, as kubeadm's TLS bootstrapping.
		rbacutil.NamedGroupBinding("steadyplane:node-bootstrapper", "system:node-bootstrapper", JoinGroup),
		rbacutil.NamedGroupBinding("steadyplane:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", JoinGroup),
	)
}

// PublishToken makes t a bootstrap token of the join group: enough to ask
// for a node's client certificate, and nothing else unless Publish also
// sealed the cluster's keys for it (a server token). A node token is
// published with this alone: a worker host holding it cannot open the
// cluster's keys.
func PublishToken(ctx context.Context, client kubernetes.Interface, t Token, expires time.Time, description string) error {
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(t.ID), Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy},
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
	if !expires.IsZero() {
		token.StringData[bootstrapapi.BootstrapTokenExpirationKey] = expires.UTC().Format(time.RFC3339)
	}
	return applySecret(ctx, client, token)
}

// PublishServers writes kube-public/cluster-info: the CA and the API
// servers, as a kubeconfig whose cluster lists them as alternatives.
func PublishServers(ctx context.Context, client kubernetes.Interface, caPEM []byte, serverURL string, servers []string) error {
	kubeconfig := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: caPEM}
	if len(servers) > 0 {
		if err := altsvcclient.SetKubeconfigHosts(cluster, servers); err != nil {
			return err
		}
	}
	kubeconfig.Clusters[""] = cluster
	data, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return err
	}
	return applyClusterInfo(ctx, client, string(data))
}

// Servers joining at once write the same objects: a write that lost the
// race reads the object again and writes once more (RetryOnConflict).

func applySecret(ctx context.Context, client kubernetes.Interface, s *corev1.Secret) error {
	api := client.CoreV1().Secrets(s.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, s, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return conflict(s.Name)
			}
		case err == nil:
			existing.Data, existing.StringData, existing.Labels = s.Data, s.StringData, s.Labels
			_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// applyClusterInfo writes kube-public/cluster-info's kubeconfig, keeping
// the signatures the bootstrap signer adds when it did not change.
func applyClusterInfo(ctx context.Context, client kubernetes.Interface, kubeconfig string) error {
	api := client.CoreV1().ConfigMaps(metav1.NamespacePublic)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		existing, err := api.Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: metav1.NamespacePublic, Labels: rbacutil.ManagedBy},
				Data:       map[string]string{bootstrapapi.KubeConfigKey: kubeconfig},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return conflict(bootstrapapi.ConfigMapClusterInfo)
			}
		case err == nil && existing.Data[bootstrapapi.KubeConfigKey] != kubeconfig:
			if existing.Data == nil {
				existing.Data = map[string]string{}
			}
			existing.Data[bootstrapapi.KubeConfigKey] = kubeconfig
			_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", metav1.NamespacePublic, bootstrapapi.ConfigMapClusterInfo, err)
	}
	return nil
}

// conflict turns a create that lost the race into a conflict, for
// RetryOnConflict to read the object and write it again.
func conflict(name string) error {
	return apierrors.NewConflict(corev1.Resource("objects"), name, errors.New("created meanwhile"))
}
