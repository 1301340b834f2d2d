package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// KubeletClientBinding is the ClusterRoleBinding that lets the API server's
// kubelet client certificate use the node API (logs, exec, attach,
// port-forward) through upstream's system:kubelet-api-admin role, and
// nothing else: the certificate is not in system:masters.
const KubeletClientBinding = "steadyplane:kube-apiserver-kubelet-client"

// installKubeletClientAccess adds a post-start hook that binds the user of
// the --kubelet-client-certificate to system:kubelet-api-admin, so that
// nodes authorize the API server's calls by SubjectAccessReview.
func installKubeletClientAccess(c *genericapiserver.Config, certFile string) error {
	user, err := certificateUser(certFile)
	if err != nil {
		return err
	}
	c.AddPostStartHookOrDie("steadyplane-kubelet-client-rbac", func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return err
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: KubeletClientBinding, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		// /readyz waits for this hook: an API server that cannot reach its
		// nodes' logs and exec is not ready.
		return wait.PollUntilContextTimeout(hc, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return true, nil
			}
			klog.V(2).InfoS("Binding the kubelet client certificate; retrying", "user", user, "err", err)
			return false, nil
		})
	})
	return nil
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
