package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/steadyplane/steadyplane/pkg/rbacutil"
)

// KubeletClientBinding is the ClusterRoleBinding that lets the API server's
// kubelet client certificate use the node API (logs, exec, attach,
// port-forward) through upstream's system:kubelet-api-admin role; with
// ReleaseUploaderRole, that is all it may: the certificate is not in
// system:masters.
const KubeletClientBinding = "steadyplane:kube-apiserver-kubelet-client"

// installKubeletClientAccess adds a post-start hook that binds the user of
// the --kubelet-client-certificate to system:kubelet-api-admin, so that
// nodes authorize the API server's calls by SubjectAccessReview. /readyz
// waits for it: an API server that cannot reach its nodes' logs and exec
// is not ready.
func installKubeletClientAccess(c *genericapiserver.Config, certFile string) error {
	user, err := certificateUser(certFile)
	if err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: KubeletClientBinding, Labels: rbacutil.ManagedBy},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	// A release handed in through the node proxy (steadyplane upgrade
	// --kubeconfig) reaches the node as the API server's request: whoever
	// may use nodes/proxy, which runs anything on a node already, may.
	uploader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ReleaseUploaderRole, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/releases"}, Verbs: []string{"update"}}}}
	installRBAC(c, "steadyplane-kubelet-client-rbac", binding, uploader, rbacutil.UserBinding(ReleaseUploaderRole, "", user))
	return nil
}

// ReleaseUploaderRole lets the API server hand a steadyplane binary to a
// node's API (PUT /releases/<digest>, update on nodes/releases).
const ReleaseUploaderRole = "steadyplane:release-uploader"

// NodePeersRole lets every node read all Nodes, which the Node authorizer
// no longer allows (a node reads only its own): a node agent routes the
// other nodes' pod ranges through their addresses (podnet.PeerRoutes).
const NodePeersRole = "steadyplane:node-peers"

// NodeProxierBinding binds upstream's system:node-proxier ClusterRole
// (watch Services, Endpoints, EndpointSlices, ServiceCIDRs and Nodes;
// write Events) to the group of nodes: a worker's kube-proxy runs with its
// node's credentials, as it holds no other (upstream binds the role to
// system:kube-proxy alone, under the role's name). A node so reads what
// upstream's kube-proxy DaemonSet token reads on every node.
const NodeProxierBinding = "steadyplane:node-proxier"

// nodePeersAccess are NodePeersRole and NodeProxierBinding, bound to the
// group of nodes.
func nodePeersAccess() []any {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: NodePeersRole, Labels: rbacutil.ManagedBy},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}}
	return []any{role, rbacutil.GroupBinding(NodePeersRole, user.NodesGroup), rbacutil.NamedGroupBinding(NodeProxierBinding, "system:node-proxier", user.NodesGroup)}
}

// installRBAC adds a post-start hook named hook that makes objs
// (rbacutil.Ensure) through the loopback client, retrying for a minute;
// /readyz waits for it.
func installRBAC(c *genericapiserver.Config, hook string, objs ...any) {
	c.AddPostStartHookOrDie(hook, func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		return wait.PollUntilContextTimeout(hc, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := rbacutil.Ensure(ctx, client, objs...); err != nil {
				klog.V(2).InfoS("Making steadyplane's RBAC objects; retrying", "hook", hook, "err", err)
				return false, nil
			}
			return true, nil
		})
	})
}

// certificateUser is the user name (common name) of the first certificate
// in a PEM file.
func certificateUser(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--kubelet-client-certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", fmt.Errorf("--kubelet-client-certificate=%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("--kubelet-client-certificate=%s: %w", path, err)
	}
	if cert.Subject.CommonName == "" {
		return "", fmt.Errorf("--kubelet-client-certificate=%s has no common name to authorize", path)
	}
	return cert.Subject.CommonName, nil
}
