package readinessgates

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/webhook"
)

// User is the identity the readiness controller runs as.
const User = "steadyplane:readiness-controller"

// roleName names the ClusterRole and its binding.
const roleName = "steadyplane:readiness-controller"

// ClusterRole is exactly what the controller does: watch namespaces (the
// webhook's label) and pods, patch pod status (its one condition), and
// keep its own webhook configuration, which it may create but change only by
// name.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: []string{"create"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{webhook.ConfigurationName}, Verbs: []string{"get", "update"}},
		},
	}
}

// ClusterRoleBinding binds ClusterRole to User.
func ClusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleName, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User}},
	}
}

// EnsureRBAC creates the role and binding, or brings them back to what
// they must be, with a client that may (the cluster's admin).
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	roles := client.RbacV1().ClusterRoles()
	role := ClusterRole()
	if existing, err := roles.Get(ctx, role.Name, metav1.GetOptions{}); err == nil {
		existing.Rules = role.Rules
		_, err = roles.Update(ctx, existing, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating ClusterRole %s: %w", role.Name, err)
		}
	} else if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	binding := ClusterRoleBinding()
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}
