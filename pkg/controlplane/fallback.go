package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/installer"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// operatorPod is the KubeAPIServer operator's static pod.
const operatorPod = "steadyplane-kubeapiserver-operator"

// fallbackOn says whether this run rolls the API server out as revisions:
// it needs static pods, the controllers (installer pods need service
// account tokens and the cluster CA ConfigMap) and the node agent's
// read-only endpoint (the startup monitor's view while the API is down).
func (cp *ControlPlane) fallbackOn() bool {
	return cp.opts.Fallback.Enabled(cp.staticPods && cp.ControllerManager != nil && cp.opts.NodeMetricsPort != 0)
}

// prepareFallback issues the operator's and the startup monitor's client
// certificates.
func (cp *ControlPlane) prepareFallback() error {
	for name, user := range map[string]string{"kubeapiserver-operator": operator.OperatorUser, "startup-monitor": operator.MonitorUser} {
		if _, err := cp.componentKubeconfig(name, user); err != nil {
			return err
		}
	}
	return nil
}

// apiserverLayout is the API server's revisions on this node.
func (cp *ControlPlane) apiserverLayout() revisions.Layout {
	return revisions.ForDataDir(cp.dataDir, operator.Operand)
}

// fallbackTemplates are the pods every revision is made from: the API
// server as "up" would run it (with the resources directory as a volume a
// revision mounts), its startup monitor, and the installer pod.
func (cp *ControlPlane) fallbackTemplates() (map[string]string, error) {
	l := cp.apiserverLayout()
	var operand *corev1.Pod
	for _, c := range cp.Components(cp.bin) {
		if c.Name == operator.Operand {
			operand = c.Pod()
		}
	}
	operand.Spec.Volumes = append(operand.Spec.Volumes, corev1.Volume{Name: operator.ResourcesVolume,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: l.ResourcesDir}}})
	files := []HostPath{{Path: l.ResourcesDir}, {Path: l.ManifestsDir}, {Path: filepath.Dir(l.LockPath)}}
	monitor := Component{Name: strings.TrimSuffix(filepath.Base(l.MonitorManifest()), ".yaml"), Binary: cp.bin,
		Args: []string{"startup-monitor", "--data-dir=" + cp.dataDir, "--operand=" + operator.Operand, "--node-name=" + cp.opts.NodeName,
			"--kubeconfig=" + filepath.Join(cp.dataDir, "startup-monitor.kubeconfig"),
			"--node-status-url=http://127.0.0.1:" + strconv.Itoa(cp.opts.NodeMetricsPort),
			"--timeout=" + cp.opts.FallbackTimeout.String(), "--first-start-timeout=" + cp.opts.FallbackFirstStartTimeout.String()},
		HostPaths: append([]HostPath{{Path: filepath.Join(cp.dataDir, "pki"), ReadOnly: true},
			{Path: filepath.Join(cp.dataDir, "startup-monitor.kubeconfig"), ReadOnly: true}}, files...),
	}.Pod()
	// Done is done: it removes its own manifest; only a failure reruns it.
	monitor.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	inst := Component{Name: "installer", Binary: cp.bin,
		Args:      []string{"installer", "--data-dir=" + cp.dataDir, "--operand=" + operator.Operand, "--server=" + cp.APIServerURL()},
		HostPaths: files,
	}.Pod()
	inst.Namespace = v1alpha1.Namespace
	inst.Labels = map[string]string{"app": "installer", "component": operator.Operand}
	inst.Spec.ServiceAccountName = operator.InstallerServiceAccount
	inst.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	inst.Spec.PriorityClassName = ""
	// Installs go on also on a node that is not Ready: it may be exactly
	// what repairs it.
	inst.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	out := map[string]string{}
	for key, pod := range map[string]*corev1.Pod{operator.OperandKey: operand, operator.MonitorKey: monitor, operator.InstallerKey: inst} {
		b, err := yaml.Marshal(pod)
		if err != nil {
			return nil, err
		}
		out[key] = string(b)
	}
	return out, nil
}

// installAPIServer puts the API server's manifest in place before the
// node agent starts: the last-known-good revision (or, without one, the
// newest), or in a new data directory revision 1, made from the templates
// as the operator would make it, which it then finds in the API.
func (cp *ControlPlane) installAPIServer(ctx context.Context) error {
	l := cp.apiserverLayout()
	n, err := l.LastKnownGood()
	if err != nil {
		return err
	}
	if n == 0 {
		revs, err := l.Revisions()
		if err != nil {
			return err
		}
		if len(revs) > 0 {
			n = revs[len(revs)-1]
			cp.progressf("kube-apiserver: no last-known-good revision; starting the newest, %d", n)
		}
	}
	if n > 0 {
		cp.progressf("kube-apiserver: revision %d (last-known-good), rolled out by the KubeAPIServer operator", n)
		return installer.Restore(ctx, l, n)
	}
	data, err := cp.fallbackTemplates()
	if err != nil {
		return err
	}
	cm, err := bootstrapRevision(data)
	if err != nil {
		return err
	}
	cp.progressf("kube-apiserver: revision 1 (bootstrap), rolled out by the KubeAPIServer operator from now on")
	_, err = installer.Install(ctx, l, installer.Revision{Number: 1, Operand: []byte(cm.Data[operator.RevisionOperandKey])}, installer.Options{})
	return err
}

// bootstrapRevision is revision 1 as the operator makes it from the
// templates (fallbackTemplates) and an empty spec.
func bootstrapRevision(data map[string]string) (*corev1.ConfigMap, error) {
	t, err := operator.ParseTemplates(data)
	if err != nil {
		return nil, err
	}
	return operator.RevisionConfigMap(t, operator.Inputs{Templates: data, ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}, 1, "bootstrap by steadyplane up")
}

// startFallback, once the API server answers: marks a bootstrap revision
// last-known-good, creates the KubeAPIServer CRD, its namespace and RBAC,
// the templates, revision 1 and the object "cluster" where missing, then
// starts the operator and waits until it reports.
func (cp *ControlPlane) startFallback(ctx context.Context) error {
	l := cp.apiserverLayout()
	if n, err := l.LastKnownGood(); err != nil {
		return err
	} else if n == 0 {
		if err := l.SetLastKnownGood(l.InstalledRevision()); err != nil {
			return err
		}
	}
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := ensureCRD(ctx, ext, v1alpha1.CRD()); err != nil {
		return err
	}
	if err := operator.EnsureRBAC(ctx, client); err != nil {
		return err
	}
	data, err := cp.fallbackTemplates()
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	tmpl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: operator.TemplatesConfigMap, Namespace: v1alpha1.Namespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "steadyplane"}}, Data: data}
	if existing, err := cms.Get(ctx, tmpl.Name, metav1.GetOptions{}); err == nil {
		existing.Data = data
		_, err = cms.Update(ctx, existing, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating the templates: %w", err)
		}
	} else if _, err := cms.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the templates: %w", err)
	}
	rev1, err := bootstrapRevision(data)
	if err != nil {
		return err
	}
	if _, err := cms.Create(ctx, rev1, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating revision 1: %w", err)
	}
	api := v1alpha1.Client{Dynamic: dyn}
	if err := api.Create(ctx, &v1alpha1.KubeAPIServer{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.Name}}); err != nil {
		return fmt.Errorf("creating KubeAPIServer %s: %w", v1alpha1.Name, err)
	}
	cp.progressf("starting the KubeAPIServer operator (static pod %s; kubectl get kubeapiserver cluster)", operatorPod)
	start := time.Now()
	if err := cp.writeManifests(operatorPod); err != nil {
		return err
	}
	if err := poll(ctx, cp.Node, cp.opts.ReadyTimeout, 250*time.Millisecond, func(ctx context.Context) (bool, string) {
		obj, err := api.Get(ctx, v1alpha1.Name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionAvailable), "the operator has not reported Available"
	}); err != nil {
		return err
	}
	cp.progressf("KubeAPIServer operator ready in %.1fs", time.Since(start).Seconds())
	return nil
}

// ensureCRD creates or updates crd and waits until it is served.
func ensureCRD(ctx context.Context, client apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{}); err == nil {
		existing.Spec = crd.Spec
		if _, err := crds.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
		}
	} else if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		return err == nil && apiextensionshelpers.IsCRDConditionTrue(got, apiextensionsv1.Established), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("CRD %s not established after 30s", crd.Name)
	}
	return err
}
