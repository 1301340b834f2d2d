package controlplane

import (
	"context"
	"fmt"
	"strings"

	"github.com/steadyplane/steadyplane/pkg/addons/coredns"
	"github.com/steadyplane/steadyplane/pkg/addons/kubeproxy"
	"github.com/steadyplane/steadyplane/pkg/addons/metricsapi"
	"github.com/steadyplane/steadyplane/pkg/node/staticpod"
)

// The control plane's components, by the names of their static pods.
const (
	etcdComponent              = "etcd"
	apiserverComponent         = "kube-apiserver"
	controllerManagerComponent = "kube-controller-manager"
	schedulerComponent         = "kube-scheduler"
	// nodeComponent is the node agent: a process in either launch mode.
	nodeComponent  = "node"
	proxyComponent = kubeproxy.Name
	// operatorPod is the KubeAPIServer operator's static pod.
	operatorPod = "steadyplane-kubeapiserver-operator"
	// dnsComponent is the cluster's DNS: a Deployment, not a static pod.
	dnsComponent = coredns.Name
	// readinessPod is the readiness controller's static pod.
	readinessPod = "steadyplane-readiness-controller"
)

// kind is how a component runs.
type kind int

const (
	// hostComponent runs as a static pod on the node agent, or as a child
	// process of up (its Process).
	hostComponent kind = iota
	// agentComponent is the node agent itself: a child process of up in
	// either launch mode.
	agentComponent
	// podOnly runs only as a static pod (the KubeAPIServer operator, whose
	// work needs the revisions of static pods).
	podOnly
	// apiObjects is objects in the API that the cluster's controllers run
	// (CoreDNS's Deployment).
	apiObjects
)

// upgrade is how a component moves to another steadyplane binary: the
// order and care of an upgrade of steadyplane itself. Nothing acts on it
// yet; the upgrade of releases will.
type upgrade int

const (
	// upgradeRestart writes the component's pod (or starts its process)
	// with the new binary and waits until it is ready.
	upgradeRestart upgrade = iota
	// upgradeMember is etcd's: one member at a time, only while the others
	// keep a quorum, its data kept.
	upgradeMember
	// upgradeRevision is the API server's: a new revision rolled out node
	// by node by the operator, watched by the startup monitor, which falls
	// back when it fails.
	upgradeRevision
	// upgradeAgent is the node agent's: last on its node, handing over to
	// the new agent, which adopts the running containers.
	upgradeAgent
	// upgradeApply applies the component's objects again, naming the new
	// binary's image.
	upgradeApply
)

// component is one row of the control plane's table: what it is, whether
// this run has it, how it starts, what it needs before, when it is ready,
// the line that says so, and how it is upgraded. startOrder says when.
type component struct {
	name string
	kind kind
	// prepare issues the component's credentials and decides its process,
	// or leaves it out (enabled then says false); nil for none. Prepare
	// runs the rows in table order.
	prepare func(*ControlPlane) error
	// enabled says whether this run has the component.
	enabled func(*ControlPlane) bool
	// process is its child process (hostComponent, agentComponent).
	process func(*ControlPlane) *Process
	// pod is its static pod, running binary (hostComponent, podOnly).
	pod func(cp *ControlPlane, binary string) staticpod.Spec
	// install puts its static pod in place instead of writing pod's
	// manifest; nil writes the manifest.
	install func(*ControlPlane, context.Context) error
	// beforeStart is what it needs in the API before it starts; nil for
	// nothing.
	beforeStart func(*ControlPlane, context.Context) error
	// ready waits until it is ready.
	ready func(*ControlPlane, context.Context) error
	// report is the progress line once it is ready, s seconds after its
	// stage began.
	report  func(cp *ControlPlane, s float64) string
	upgrade upgrade
}

// components is the control plane, in the order Prepare prepares it (a
// row may depend on those before: kube-proxy on the node's runtime, the
// DNS on kube-proxy and the controllers). It is set in init: the rows'
// functions reach the table again, which an initializer may not.
var components []component

func init() {
	components = []component{
		{name: etcdComponent, kind: hostComponent, upgrade: upgradeMember,
			prepare: (*ControlPlane).prepareEtcd, enabled: always,
			process: func(cp *ControlPlane) *Process { return cp.Etcd },
			pod:     (*ControlPlane).etcdPod,
			ready:   (*ControlPlane).waitEtcdMember,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("etcd ready in %.1fs (%s)", s, cp.addr.etcdClientURL())
			}},
		{name: apiserverComponent, kind: hostComponent, upgrade: upgradeRevision,
			prepare: (*ControlPlane).prepareAPIServer, enabled: always,
			process: func(cp *ControlPlane) *Process { return cp.APIServer },
			pod:     (*ControlPlane).apiserverPod,
			install: (*ControlPlane).installAPIServer,
			ready:   (*ControlPlane).waitAPIServerServing,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("apiserver ready in %.1fs (%s)", s, cp.APIServerURL())
			}},
		{name: controllerManagerComponent, kind: hostComponent, upgrade: upgradeRestart,
			prepare: (*ControlPlane).prepareControllers,
			enabled: func(cp *ControlPlane) bool { return cp.ControllerManager != nil },
			process: func(cp *ControlPlane) *Process { return cp.ControllerManager },
			pod:     (*ControlPlane).controllerManagerPod,
			ready:   (*ControlPlane).waitControllerManagerReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("%s leader in %.1fs", cp.ControllerManager.Name, s)
			}},
		{name: schedulerComponent, kind: hostComponent, upgrade: upgradeRestart,
			enabled: func(cp *ControlPlane) bool { return cp.Scheduler != nil },
			process: func(cp *ControlPlane) *Process { return cp.Scheduler },
			pod:     (*ControlPlane).schedulerPod,
			ready:   (*ControlPlane).waitSchedulerReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("%s leader in %.1fs", cp.Scheduler.Name, s)
			}},
		{name: nodeComponent, kind: agentComponent, upgrade: upgradeAgent,
			prepare: (*ControlPlane).prepareNode,
			enabled: func(cp *ControlPlane) bool { return cp.Node != nil },
			process: func(cp *ControlPlane) *Process { return cp.Node },
			ready:   (*ControlPlane).WaitNodeReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("node %s ready in %.1fs (static pod manifests: %s)", cp.opts.NodeName, s, cp.dir.manifestsDir())
			}},
		{name: proxyComponent, kind: hostComponent, upgrade: upgradeRestart,
			prepare: (*ControlPlane).prepareProxy,
			enabled: func(cp *ControlPlane) bool { return cp.Proxy != nil },
			process: func(cp *ControlPlane) *Process { return cp.Proxy },
			pod:     (*ControlPlane).proxyPod,
			ready:   (*ControlPlane).waitProxyReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("kube-proxy (%s mode) ready in %.1fs", cp.proxyMode, s)
			}},
		{name: dnsComponent, kind: apiObjects, upgrade: upgradeApply,
			prepare:     (*ControlPlane).prepareDNS,
			enabled:     func(cp *ControlPlane) bool { return cp.dns != nil },
			beforeStart: (*ControlPlane).applyDNS,
			ready:       (*ControlPlane).waitDNSReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("cluster DNS ready in %.1fs (Service %s %s, domain %s)", s, coredns.ServiceName, cp.dns.ServiceIP, cp.dns.Domain)
			}},
		{name: operatorPod, kind: podOnly, upgrade: upgradeRestart,
			prepare:     (*ControlPlane).prepareFallback,
			enabled:     (*ControlPlane).fallbackOn,
			pod:         (*ControlPlane).operatorPod,
			beforeStart: (*ControlPlane).publishTemplates,
			ready:       (*ControlPlane).waitOperatorReady,
			report: func(_ *ControlPlane, s float64) string {
				return fmt.Sprintf("KubeAPIServer operator ready in %.1fs", s)
			}},
		{name: readinessPod, kind: hostComponent, upgrade: upgradeRestart,
			prepare:     (*ControlPlane).prepareReadiness,
			enabled:     func(cp *ControlPlane) bool { return cp.Readiness != nil },
			process:     func(cp *ControlPlane) *Process { return cp.Readiness },
			pod:         (*ControlPlane).readinessPodSpec,
			beforeStart: (*ControlPlane).grantReadinessRBAC,
			ready:       (*ControlPlane).waitReadinessControllerReady,
			report: func(_ *ControlPlane, s float64) string {
				return fmt.Sprintf("readiness-gate webhook ready in %.1fs (label a namespace steadyplane.io/readiness-gates to use it)", s)
			}},
		{name: metricsComponent, kind: apiObjects, upgrade: upgradeApply,
			prepare:     (*ControlPlane).prepareMetrics,
			enabled:     func(cp *ControlPlane) bool { return cp.metrics != nil },
			beforeStart: (*ControlPlane).applyMetrics,
			ready:       (*ControlPlane).waitMetricsStarted,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("metrics API started in %.1fs (kubectl top answers after two scrapes, %s apart)", s, metricsapi.Resolution)
			}},
		{name: addonsPod, kind: hostComponent, upgrade: upgradeRestart,
			prepare:     (*ControlPlane).prepareAddons,
			enabled:     func(cp *ControlPlane) bool { return cp.Addons != nil },
			process:     func(cp *ControlPlane) *Process { return cp.Addons },
			pod:         (*ControlPlane).addonsPodSpec,
			beforeStart: (*ControlPlane).grantAddonsRBAC,
			ready:       (*ControlPlane).waitAddonsReady,
			report: func(cp *ControlPlane, s float64) string {
				return fmt.Sprintf("add-on controllers leading in %.1fs (%s)", s, strings.Join(cp.opts.addonControllers(), ", "))
			}},
	}
}

func always(*ControlPlane) bool { return true }

// componentNamed returns the table's row of name; the names are the
// table's own constants, so an unknown one is a programming error.
func componentNamed(name string) *component {
	for i := range components {
		if components[i].name == name {
			return &components[i]
		}
	}
	panic("controlplane: no component " + name)
}

// podSpecs returns the static pods of this run's enabled components,
// running binary, with the same arguments as their processes.
func (cp *ControlPlane) podSpecs(binary string) []staticpod.Spec {
	var out []staticpod.Spec
	for _, c := range components {
		if c.pod != nil && c.enabled(cp) {
			out = append(out, c.pod(cp, binary))
		}
	}
	return out
}
