// Package rbacutil creates the identities' roles and bindings of
// steadyplane's components, or brings existing ones back to what they must
// be, with a client that may (the cluster's admin).
package rbacutil

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ManagedBy labels what steadyplane made.
var ManagedBy = map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}

// Ensure creates each object (ClusterRole, ClusterRoleBinding, Role,
// RoleBinding, ServiceAccount or Namespace); a role that exists gets its
// rules replaced, so that an upgrade narrows or widens them.
func Ensure(ctx context.Context, client kubernetes.Interface, objs ...any) error {
	for _, obj := range objs {
		var err error
		var kind, name string
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			kind, name = "ClusterRole", o.Name
			api := client.RbacV1().ClusterRoles()
			var existing *rbacv1.ClusterRole
			if existing, err = api.Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
				existing.Rules = o.Rules
				_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
			} else if apierrors.IsNotFound(err) {
				_, err = api.Create(ctx, o, metav1.CreateOptions{})
			}
		case *rbacv1.Role:
			kind, name = "Role", o.Namespace+"/"+o.Name
			api := client.RbacV1().Roles(o.Namespace)
			var existing *rbacv1.Role
			if existing, err = api.Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
				existing.Rules = o.Rules
				_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
			} else if apierrors.IsNotFound(err) {
				_, err = api.Create(ctx, o, metav1.CreateOptions{})
			}
		case *rbacv1.ClusterRoleBinding:
			kind, name = "ClusterRoleBinding", o.Name
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			kind, name = "RoleBinding", o.Namespace+"/"+o.Name
			_, err = client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			kind, name = "ServiceAccount", o.Namespace+"/"+o.Name
			_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Namespace:
			kind, name = "Namespace", o.Name
			_, err = client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("rbacutil: cannot ensure a %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s %s: %w", kind, name, err)
		}
	}
	return nil
}

// UserBinding binds role (a ClusterRole, or a Role when namespace is set)
// to user, under the role's name.
func UserBinding(role, namespace, user string) any {
	roleKind := "ClusterRole"
	if namespace != "" {
		roleKind = "Role"
	}
	return binding(role, namespace, roleKind, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user})
}

// GroupBinding binds ClusterRole role to group, under the role's name.
func GroupBinding(role, group string) any {
	return binding(role, "", "ClusterRole", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group})
}

// NamespacedGroupBinding binds Role role in namespace to group, under the
// role's name.
func NamespacedGroupBinding(role, namespace, group string) any {
	return binding(role, namespace, "Role", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group})
}

// NamedGroupBinding binds ClusterRole role to group under name: for a
// role of upstream's bootstrap policy, whose own name is taken by
// upstream's binding of it.
func NamedGroupBinding(name, role, group string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ManagedBy},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}}}
}

// ServiceAccountBinding binds Role role in namespace to a service account there.
func ServiceAccountBinding(role, namespace, serviceAccount string) any {
	return binding(role, namespace, "Role", serviceAccountSubject(namespace, serviceAccount))
}

// ServiceAccount is an add-on's service account, namespace/name.
func ServiceAccount(namespace, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: ManagedBy}}
}

// ServiceAccountClusterBinding binds ClusterRole role to the service
// account namespace/serviceAccount under name (the role's own, or another
// for a role of upstream's bootstrap policy).
func ServiceAccountClusterBinding(name, role, namespace, serviceAccount string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ManagedBy},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{serviceAccountSubject(namespace, serviceAccount)}}
}

// NamedServiceAccountBinding binds Role role in namespace to a service
// account there under name: for a role of upstream's bootstrap policy
// (extension-apiserver-authentication-reader).
func NamedServiceAccountBinding(name, role, namespace, serviceAccount string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: ManagedBy},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects: []rbacv1.Subject{serviceAccountSubject(namespace, serviceAccount)}}
}

func serviceAccountSubject(namespace, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}
}

func binding(role, namespace, roleKind string, subject rbacv1.Subject) any {
	meta := metav1.ObjectMeta{Name: role, Namespace: namespace, Labels: ManagedBy}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: role}
	if namespace == "" {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
	}
	return &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
}

// LeaseRole is the Role name in kube-system that lets the processes of a
// cluster's servers take turns at the Lease lease (leader election), and
// touch no other: RBAC cannot limit a create to a name, so create is on
// any Lease, get and update on that one.
func LeaseRole(name, lease string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: ManagedBy},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease}, Verbs: []string{"get", "update"}},
		},
	}
}
