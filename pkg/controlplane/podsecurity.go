package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// Pod Security levels, as the PodSecurity admission plugin names them.
var podSecurityLevels = []string{"privileged", "baseline", "restricted"}

// systemNamespaces are steadyplane's own: exempt from Pod Security, and
// the only ones whose pods may use the host runtime class.
var systemNamespaces = []string{metav1.NamespaceSystem, v1alpha1.Namespace}

// PodSecurityAdmission is the API server's admission configuration file for
// the PodSecurity plugin: enforce is the level enforced in every namespace
// but steadyplane's own (as k3s's and a hardened kubeadm's), restricted is
// warned about and audited; a namespace's pod-security.kubernetes.io labels
// still choose its own.
func PodSecurityAdmission(enforce string) ([]byte, error) {
	valid := false
	for _, l := range podSecurityLevels {
		valid = valid || l == enforce
	}
	if !valid {
		return nil, fmt.Errorf("pod security level %q: want one of %v", enforce, podSecurityLevels)
	}
	cfg := map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
		"plugins": []any{map[string]any{
			"name": "PodSecurity",
			"configuration": map[string]any{
				"apiVersion": "pod-security.admission.config.k8s.io/v1",
				"kind":       "PodSecurityConfiguration",
				"defaults": map[string]string{
					"enforce": enforce, "enforce-version": "latest",
					"audit": "restricted", "audit-version": "latest",
					"warn": "restricted", "warn-version": "latest",
				},
				"exemptions": map[string]any{"usernames": []string{}, "runtimeClasses": []string{}, "namespaces": systemNamespaces},
			},
		}},
	}
	return yaml.Marshal(cfg)
}

// clusterAdmissionFile is where a joined server keeps the admission
// configuration of the cluster it joined, in its apiserver-config/.
const clusterAdmissionFile = "cluster-admission.yaml"

// keepClusterAdmission keeps the admission configuration a joining server
// received with the cluster's keys (0600).
func (cp *ControlPlane) keepClusterAdmission(b []byte) error {
	if err := os.MkdirAll(cp.dir.apiserverConfigDir(), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(cp.dir.apiserverConfigDir(), clusterAdmissionFile), b, 0o600)
}

// admissionSource decides a server's admission configuration: the user's
// file, or the level the user gave, or the cluster's that a joined server
// received (clusterAdmission, nil when none), or the default level. A
// server told otherwise than its cluster is warned: a pod's admission
// would depend on the API server it reaches.
func admissionSource(o Options, clusterAdmission []byte) (useCluster bool, warning string) {
	switch {
	case o.PodSecurityConfigFile != "" && clusterAdmission != nil:
		return false, "--pod-security-config replaces the Pod Security configuration of the cluster this server joined: pods are admitted differently by this server's API server than by the others', unless every server has the same"
	case o.PodSecurityConfigFile != "":
		return false, ""
	case clusterAdmission == nil:
		return false, ""
	case !o.PodSecuritySet:
		return true, ""
	}
	if own, err := PodSecurityAdmission(o.PodSecurity); err == nil && string(own) == string(clusterAdmission) {
		return false, ""
	}
	return false, fmt.Sprintf("--pod-security=%s differs from the Pod Security configuration of the cluster this server joined: pods are admitted differently by this server's API server than by the others', unless every server enforces the same", o.PodSecurity)
}

// writeAdmissionConfig writes the API server's admission configuration:
// the user's file (--pod-security-config) copied as it is, or steadyplane's
// default with the --pod-security level, or on a joined server not told
// either the cluster's (admissionSource). It returns the file's path.
func (cp *ControlPlane) writeAdmissionConfig() (string, error) {
	var b []byte
	var err error
	cluster, err := os.ReadFile(filepath.Join(cp.dir.apiserverConfigDir(), clusterAdmissionFile))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	useCluster, warning := admissionSource(cp.opts, cluster)
	if warning != "" {
		cp.progressf("WARNING: %s", warning)
	}
	if useCluster {
		b = cluster
	} else if cp.opts.PodSecurityConfigFile != "" {
		if b, err = os.ReadFile(cp.opts.PodSecurityConfigFile); err != nil {
			return "", fmt.Errorf("--pod-security-config: %w", err)
		}
		var probe struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(b, &probe); err != nil || probe.Kind != "AdmissionConfiguration" {
			return "", fmt.Errorf("--pod-security-config %s: not an AdmissionConfiguration (apiserver.config.k8s.io/v1) file: %v", cp.opts.PodSecurityConfigFile, err)
		}
	} else if b, err = PodSecurityAdmission(cp.opts.PodSecurity); err != nil {
		return "", fmt.Errorf("--pod-security: %w", err)
	}
	if err := os.MkdirAll(cp.dir.apiserverConfigDir(), 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(cp.dir.apiserverConfigDir(), "admission.yaml")
	return path, atomicfile.WriteFile(path, b, 0o600)
}

// hostRuntimeClassPolicy is the ValidatingAdmissionPolicy that keeps the
// host runtime class (the host's system directories as a pod's root) to
// steadyplane's own namespaces: Pod Security has no rule for runtime
// classes.
const hostRuntimeClassPolicy = "steadyplane-host-runtime-class"

// EnsureHostRuntimeClassPolicy creates the policy and its binding.
func EnsureHostRuntimeClassPolicy(ctx context.Context, client kubernetes.Interface) error {
	allowed := ""
	for i, ns := range systemNamespaces {
		if i > 0 {
			allowed += ", "
		}
		allowed += "'" + ns + "'"
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: hostRuntimeClassPolicy, Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.spec.runtimeClassName) || object.spec.runtimeClassName != '%s' || request.namespace in [%s]", runtime.HostRuntimeClass, allowed),
				Message:    fmt.Sprintf("runtime class %s (the host's system directories as the root filesystem) is only for steadyplane's own pods, in %v", runtime.HostRuntimeClass, systemNamespaces),
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: hostRuntimeClassPolicy, Labels: policy.Labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: hostRuntimeClassPolicy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	api := client.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ValidatingAdmissionPolicy %s: %w", policy.Name, err)
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s: %w", binding.Name, err)
	}
	return nil
}
