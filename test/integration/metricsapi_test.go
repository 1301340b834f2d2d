package integration

import (
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/steadyplane/steadyplane/pkg/addons/apply"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
	"github.com/steadyplane/steadyplane/pkg/controlplane"
)

// TestMetricsAPIObjects writes the metrics API's objects into a real API
// server as up does, twice, and asks the API server's own authorizer what
// they grant: metrics-server's service account may read the node agents'
// metrics and delegate authentication and authorization, and nothing
// more on nodes; a user bound to view may read metrics.k8s.io (pods and,
// as upstream grants it, nodes), through the aggregated reader role. The APIService carries the serving CA, not
// insecureSkipTLSVerify; a second apply with the same config leaves the
// Deployment's generation alone, and one with a user's replica count keeps
// it.
func TestMetricsAPIObjects(t *testing.T) {
	ctx, cp, _, _ := startControlPlaneWith(t, func(o *controlplane.Options) { o.Node = false })
	admin, err := cp.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(admin)
	c := metricsapi.Config{Image: "steadyplane.io/steadyplane:test", APIServer: admin.Host, Alternatives: []string{admin.Host[len("https://"):]},
		NodeCA: []byte("node CA"), ServingCA: []byte("serving CA")}
	objs, err := metricsapi.Objects(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply.Objects(ctx, admin, objs); err != nil {
		t.Fatal(err)
	}
	svc, err := aggregator.NewForConfigOrDie(admin).ApiregistrationV1().APIServices().Get(ctx, metricsapi.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.InsecureSkipTLSVerify || string(svc.Spec.CABundle) != "serving CA" {
		t.Errorf("APIService: insecureSkipTLSVerify %v, caBundle %q; want verified with the serving CA", svc.Spec.InsecureSkipTLSVerify, svc.Spec.CABundle)
	}

	sa := "system:serviceaccount:" + metricsapi.Namespace + ":" + metricsapi.Name
	// The view role picks up the aggregated reader once the controller
	// manager's aggregation controller has run: each answer is asked for
	// up to 30 s.
	viewer := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, viewer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user string
		attr authorizationv1.ResourceAttributes
		want bool
	}{
		{sa, authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "metrics", Name: "n1"}, true},
		{sa, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, true},
		{sa, authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "n1"}, false},
		{sa, authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{sa, authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{sa, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "kube-system", Resource: "configmaps", Name: "extension-apiserver-authentication"}, true},
		{sa, authorizationv1.ResourceAttributes{Verb: "get", Namespace: "kube-system", Resource: "secrets", Name: metricsapi.SecretName}, false},
		{"viewer", authorizationv1.ResourceAttributes{Verb: "list", Group: "metrics.k8s.io", Resource: "pods", Namespace: "default"}, true},
		{"viewer", authorizationv1.ResourceAttributes{Verb: "get", Group: "metrics.k8s.io", Resource: "nodes", Name: "n1"}, true}, // as upstream's reader role
		{"viewer", authorizationv1.ResourceAttributes{Verb: "create", Group: "metrics.k8s.io", Resource: "pods", Namespace: "default"}, false},
	} {
		var got bool
		var reason string
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: tc.user, ResourceAttributes: &tc.attr}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, reason = r.Status.Allowed, r.Status.Reason
			if got == tc.want || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got != tc.want {
			t.Errorf("%s may %s %s/%s %s: %v (%s); want %v", tc.user, tc.attr.Verb, tc.attr.Resource, tc.attr.Subresource, tc.attr.Group, got, reason, tc.want)
		}
	}

	// Up again: nothing changes; a user's scale stays.
	deploys := cs.AppsV1().Deployments(metricsapi.Namespace)
	d, err := deploys.Get(ctx, metricsapi.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The Deployment controller writes its status meanwhile: a conflict is
	// asked again.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := deploys.GetScale(ctx, metricsapi.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = 2
		_, err = deploys.UpdateScale(ctx, metricsapi.Name, scale, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := apply.Objects(ctx, admin, objs); err != nil {
		t.Fatal(err)
	}
	again, err := deploys.Get(ctx, metricsapi.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Generation != d.Generation+1 || *again.Spec.Replicas != 2 {
		t.Errorf("after a scale and a second apply: generation %d (was %d), replicas %d; want one more generation (the scale) and 2", again.Generation, d.Generation, *again.Spec.Replicas)
	}
}
