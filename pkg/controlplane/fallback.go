package controlplane

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/steadyplane/steadyplane/pkg/clientconfig"
	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/bootstrap"
	"github.com/steadyplane/steadyplane/pkg/fallback/installer"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// fallbackOn says whether this run rolls the API server out as revisions:
// it needs static pods, the controllers (installer pods need service
// account tokens and the cluster CA ConfigMap) and the node agent's
// read-only endpoint (the startup monitor's view while the API is down).
func (cp *ControlPlane) fallbackOn() bool {
	return cp.opts.Fallback.Enabled(cp.staticPods && cp.ControllerManager != nil && cp.opts.NodeMetricsPort != 0)
}

// startupMonitor is the startup monitor's name: its credentials'.
const startupMonitor = "startup-monitor"

// prepareFallback issues the operator's and the startup monitor's client
// certificates, when the API server may run as revisions.
func (cp *ControlPlane) prepareFallback() error {
	if !cp.opts.Fallback.Enabled(cp.opts.Controllers && cp.opts.Node) {
		return nil
	}
	for name, user := range map[string]string{"kubeapiserver-operator": operator.OperatorUser, startupMonitor: operator.MonitorUser} {
		if _, err := cp.componentKubeconfig(name, user); err != nil {
			return err
		}
	}
	return nil
}

// fallbackTemplates are the pods every revision is made from: the API
// server as "up" would run it (with the resources directory as a volume a
// revision mounts), its startup monitor, and the installer pod.
func (cp *ControlPlane) fallbackTemplates() (map[string]string, error) {
	l := cp.dir.apiserverRevisions()
	operand := cp.apiserverPod(cp.bin).Pod()
	operand.Spec.Volumes = append(operand.Spec.Volumes, corev1.Volume{Name: operator.ResourcesVolume,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: l.ResourcesDir}}})
	files := []staticpod.HostPath{{Path: l.ResourcesDir}, {Path: l.ManifestsDir}, {Path: filepath.Dir(l.LockPath)}}
	monitor := staticpod.Spec{Name: strings.TrimSuffix(filepath.Base(l.MonitorManifest()), ".yaml"), Binary: cp.bin,
		Args: []string{"startup-monitor", "--data-dir=" + string(cp.dir), "--operand=" + operator.Operand, "--node-name=" + cp.opts.NodeName,
			"--kubeconfig=" + cp.dir.kubeconfig(startupMonitor),
			"--node-status-url=http://127.0.0.1:" + strconv.Itoa(cp.opts.NodeMetricsPort),
			"--timeout=" + cp.opts.FallbackTimeout.String(), "--first-start-timeout=" + cp.opts.FallbackFirstStartTimeout.String()},
		HostPaths: append([]staticpod.HostPath{cp.pkiPath(), cp.credentialsPath(startupMonitor)}, files...),
	}.Pod()
	// Done is done: it removes its own manifest; only a failure reruns it.
	monitor.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	inst := staticpod.Spec{Name: "installer", Binary: cp.bin,
		Args:      []string{"installer", "--data-dir=" + string(cp.dir), "--operand=" + operator.Operand, "--server=" + cp.APIServerURL()},
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

// firstRevision is the API server's revision in a new data directory:
// revision 1 on a new cluster, the revision the cluster runs on a joining
// server, rendered from this node's templates.
func (cp *ControlPlane) firstRevision(ctx context.Context) (installer.Revision, error) {
	templates, err := cp.fallbackTemplates()
	if err != nil {
		return installer.Revision{}, err
	}
	if !cp.joined() {
		return bootstrap.FirstRevision(templates, cp.opts.NodeName, cp.progressf)
	}
	// Its own server does not serve yet: the admin kubeconfig lists the
	// others.
	cfg, _, err := clientconfig.Load(cp.Kubeconfig(), clientconfig.Options{})
	if err != nil {
		return installer.Revision{}, err
	}
	cfg.Timeout = 15 * time.Second
	return bootstrap.JoinRevision(ctx, cfg, templates, cp.opts.NodeName, cp.progressf)
}

// waitOperatorReady waits until the KubeAPIServer operator reports
// Available.
func (cp *ControlPlane) waitOperatorReady(ctx context.Context) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	available, err := bootstrap.OperatorAvailable(cfg)
	if err != nil {
		return err
	}
	return cp.waitFor(ctx, operatorPod, readyPoll, available)
}

// operatorPod is the KubeAPIServer operator's static pod. The node's name
// is its identity in the Lease: one operator per node (a static pod), and
// a restarted one takes its lease back at once instead of waiting out its
// predecessor's.
func (cp *ControlPlane) operatorPod(binary string) staticpod.Spec {
	kubeconfig := cp.dir.kubeconfig("kubeapiserver-operator")
	args := []string{"operator", "--kubeconfig=" + kubeconfig, "--identity=" + cp.opts.NodeName,
		"--retry-base=" + cp.opts.FallbackRetryBase.String(), "--retry-max=" + cp.opts.FallbackRetryMax.String()}
	if cp.opts.Fallback == fallback.ModeOn {
		args = append(args, "--topology=on")
	}
	if cp.opts.OperatorMetricsPort != 0 {
		args = append(args, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(cp.opts.OperatorMetricsPort))
	}
	return staticpod.Spec{Name: operatorPod, Binary: binary, Args: args,
		HostPaths: []staticpod.HostPath{cp.credentialsPath("kubeapiserver-operator")}}
}

// publishTemplates publishes this node's templates of the API server's
// revisions (and, on a new cluster, the KubeAPIServer object), which the
// operator renders revisions from.
func (cp *ControlPlane) publishTemplates(ctx context.Context) error {
	cfg, err := cp.AdminConfig()
	if err != nil {
		return err
	}
	templates, err := cp.fallbackTemplates()
	if err != nil {
		return err
	}
	if err := bootstrap.Publish(ctx, cfg, cp.dir.apiserverRevisions(), templates, cp.opts.NodeName, !cp.joined()); err != nil {
		return err
	}
	cp.progressf("starting the KubeAPIServer operator (static pod %s; kubectl get kubeapiserver cluster)", operatorPod)
	return nil
}
