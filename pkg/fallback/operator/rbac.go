package operator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// The identities of the fallback's parts, each with only what it does.
const (
	// OperatorUser is the operator's (a client certificate).
	OperatorUser = "steadyplane:kubeapiserver-operator"
	// MonitorUser is the startup monitor's (a client certificate): it reads
	// the mirror pod.
	MonitorUser = "steadyplane:startup-monitor"
	// InstallerServiceAccount is the installer pods' service account in
	// steadyplane-system: it reads the revisions.
	InstallerServiceAccount = "installer"
	installerRole           = "steadyplane:installer"
	// ReleaseReaderRole lets the nodes fetch a release from each other.
	ReleaseReaderRole = "steadyplane:release-reader"
)

// LeaseName is the Lease in steadyplane-system by which one of the operators
// (one on every server) is elected to act.
const LeaseName = "kube-apiserver-operator"

// RBAC is the namespace and every role, binding and service account of the
// operator, the installer and the startup monitor.
func RBAC() []any {
	ns := v1alpha1.Namespace
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: rbacutil.ManagedBy}
	}
	rule := func(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
	}
	watch := []string{"get", "list", "watch"}
	return []any{
		&corev1.Namespace{ObjectMeta: meta(ns, "")},
		&rbacv1.ClusterRole{ObjectMeta: meta(OperatorUser, ""), Rules: []rbacv1.PolicyRule{
			rule(v1alpha1.Group, []string{v1alpha1.Resource}, watch...),
			rule(v1alpha1.Group, []string{v1alpha1.Resource + "/status"}, "update"),
			// Events of a cluster-scoped object are in "default".
			rule("", []string{"events"}, "create", "patch"),
			// A server whose Node is gone is no longer rolled; a release
			// is rolled through annotations on the Nodes.
			rule("", []string{"nodes"}, append(watch, "patch")...),
		}},
		rbacutil.UserBinding(OperatorUser, "", OperatorUser),
		&rbacv1.Role{ObjectMeta: meta(OperatorUser, ns), Rules: []rbacv1.PolicyRule{
			rule("", []string{"configmaps", "secrets"}, append(watch, "create", "delete", "deletecollection")...),
			rule("", []string{"pods"}, append(watch, "create", "delete")...),
			// One operator of those on the servers leads (LeaseName).
			rule("coordination.k8s.io", []string{"leases"}, "get", "create", "update"),
		}},
		rbacutil.UserBinding(OperatorUser, ns, OperatorUser),
		&rbacv1.Role{ObjectMeta: meta(OperatorUser, metav1.NamespaceSystem), Rules: []rbacv1.PolicyRule{rule("", []string{"pods"}, watch...)}},
		rbacutil.UserBinding(OperatorUser, metav1.NamespaceSystem, OperatorUser),
		&corev1.ServiceAccount{ObjectMeta: meta(InstallerServiceAccount, ns)},
		&rbacv1.Role{ObjectMeta: meta(installerRole, ns), Rules: []rbacv1.PolicyRule{rule("", []string{"configmaps", "secrets"}, "get")}},
		rbacutil.ServiceAccountBinding(installerRole, ns, InstallerServiceAccount),
		&rbacv1.Role{ObjectMeta: meta(MonitorUser, metav1.NamespaceSystem), Rules: []rbacv1.PolicyRule{rule("", []string{"pods"}, "get")}},
		rbacutil.UserBinding(MonitorUser, metav1.NamespaceSystem, MonitorUser),
		// Every node may fetch a release's binary from another node's API
		// (the kubelet API's nodes/releases).
		&rbacv1.ClusterRole{ObjectMeta: meta(ReleaseReaderRole, ""), Rules: []rbacv1.PolicyRule{rule("", []string{"nodes/releases"}, "get")}},
		rbacutil.GroupBinding(ReleaseReaderRole, "system:nodes"),
	}
}

// EnsureRBAC creates RBAC's objects with a client that may.
func EnsureRBAC(ctx context.Context, client kubernetes.Interface) error {
	return rbacutil.Ensure(ctx, client, RBAC()...)
}
