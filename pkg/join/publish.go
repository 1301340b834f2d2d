package join

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

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

// publishCluster makes what every join uses, with an admin client:
// kube-public/cluster-info (the CA and serverURL, with the API servers
// (host:port) a joining host should know) readable without credentials,
// and the join group's right to ask for a node's client certificate.
// Whether one is issued is the servers' decision (RunCertificateApprover):
// the controller manager approves none for a token.
func publishCluster(ctx context.Context, client kubernetes.Interface, caPEM []byte, serverURL string, servers []string) error {
	if err := PublishServers(ctx, client, caPEM, serverURL, servers); err != nil {
		return err
	}
	if err := rbacutil.Ensure(ctx, client,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: clusterInfoRole, Namespace: metav1.NamespacePublic, Labels: rbacutil.ManagedBy},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}, ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo}}}},
		rbacutil.UserBinding(clusterInfoRole, metav1.NamespacePublic, "system:anonymous"),
		rbacutil.NamedGroupBinding("steadyplane:node-bootstrapper", "system:node-bootstrapper", JoinGroup),
	); err != nil {
		return err
	}
	// Earlier releases let the controller manager approve every request
	// of the join group, for any node's name.
	err := client.RbacV1().ClusterRoleBindings().Delete(ctx, legacyAutoApproveBinding, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ClusterRoleBinding %s: %w", legacyAutoApproveBinding, err)
	}
	return nil
}

// legacyAutoApproveBinding is the binding of earlier releases that had
// the controller manager approve the join group's node certificates.
const legacyAutoApproveBinding = "steadyplane:node-autoapprove-bootstrap"

// sealFor publishes b sealed for the server token whose bootstrap token
// Secret is owner, and a Role that lets the token's user read it and
// nothing else. All three belong to owner: deleting the token (or its
// expiry, on which the controller manager deletes it) deletes them.
func sealFor(ctx context.Context, client kubernetes.Interface, owner *corev1.Secret, b *Bundle) error {
	info, ok := tokenInfo(owner, nil)
	if !ok {
		return fmt.Errorf("secret %s is no bootstrap token", owner.Name)
	}
	t := info.Token
	sealed, err := Seal(b, t)
	if err != nil {
		return err
	}
	ref := []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("Secret"))}
	bundle := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: BundleSecretName(t.ID), Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy, OwnerReferences: ref},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{BundleKey: sealed},
	}
	binding := rbacutil.UserBinding(tokenRole(t.ID), metav1.NamespaceSystem, t.User()).(*rbacv1.RoleBinding)
	binding.OwnerReferences = ref
	if err := rbacutil.Ensure(ctx, client,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: tokenRole(t.ID), Namespace: metav1.NamespaceSystem, Labels: rbacutil.ManagedBy, OwnerReferences: ref},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{BundleSecretName(t.ID)}}}},
		binding); err != nil {
		return err
	}
	if err := adoptRole(ctx, client, tokenRole(t.ID), ref); err != nil {
		return err
	}
	return applySecret(ctx, client, bundle)
}

// adoptRole makes the token's Role and RoleBinding name (made by an
// earlier release, which gave them no owner) belong to ref.
func adoptRole(ctx context.Context, client kubernetes.Interface, name string, ref []metav1.OwnerReference) error {
	roles, bindings := client.RbacV1().Roles(metav1.NamespaceSystem), client.RbacV1().RoleBindings(metav1.NamespaceSystem)
	if r, err := roles.Get(ctx, name, metav1.GetOptions{}); err == nil && len(r.OwnerReferences) == 0 {
		r.OwnerReferences = ref
		if _, err := roles.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("Role %s: %w", name, err)
		}
	}
	if b, err := bindings.Get(ctx, name, metav1.GetOptions{}); err == nil && len(b.OwnerReferences) == 0 {
		b.OwnerReferences = ref
		if _, err := bindings.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("RoleBinding %s: %w", name, err)
		}
	}
	return nil
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
			if len(existing.OwnerReferences) == 0 {
				existing.OwnerReferences = s.OwnerReferences
			}
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
