package readinessgates

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/rbacutil"
	"github.com/steadyplane/steadyplane/pkg/readinessgates/webhook"
)

// User is the identity the readiness controller runs as.
const User = "steadyplane:readiness-controller"

// roleName names the ClusterRole and its binding.
const roleName = "steadyplane:readiness-controller"

// ClusterRole is exactly what the controller does: watch namespaces (the
// webhook's label) and pods, patch pod status (its one condition), watch
// Services, EndpointSlices and Nodes (the data path, when required), and
// keep its own webhook configuration up to date, by name. It may create
// none: RBAC cannot restrict a create to a name, and a webhook
// configuration of its choosing could change any object on its way in;
// the servers' up makes the configuration (EnsureWebhookConfiguration).
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{webhook.ConfigurationName}, Verbs: []string{"get", "update"}},
		},
	}
}

// LeaseRole lets the controllers of a cluster's servers take turns at
// their Lease (Options.Identity), and touch no other.
func LeaseRole() *rbacv1.Role { return rbacutil.LeaseRole(roleName, LeaseName) }

// EnsureWebhookConfiguration makes the webhook's configuration, sending
// to url and trusting caBundle, with a client that may (the cluster's
// admin), unless it exists: the controller may only update it.
func EnsureWebhookConfiguration(ctx context.Context, client kubernetes.Interface, url string, caBundle []byte) error {
	_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.ConfigurationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return webhook.Register(ctx, client, url, caBundle)
	}
	return err
}

// EnsureRBAC creates the roles and bindings, or brings them back to what
// they must be, with a client that may (the cluster's admin).
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	return rbacutil.Ensure(ctx, client, ClusterRole(), rbacutil.UserBinding(roleName, "", User),
		LeaseRole(), rbacutil.UserBinding(roleName, metav1.NamespaceSystem, User))
}
