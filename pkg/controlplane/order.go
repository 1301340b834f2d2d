package controlplane

import (
	"context"
	"path/filepath"
	"time"

	"github.com/steadyplane/steadyplane/pkg/clusterdns"
	"github.com/steadyplane/steadyplane/pkg/fallback/bootstrap"
	"github.com/steadyplane/steadyplane/pkg/readinessgates"
)

// stage is one step of the start-up: its components start together, then
// each of ready is waited for in turn.
type stage struct {
	start, ready []string
}

// startOrder is the control plane's start-up order, for every launcher:
// etcd and the API server first, with the node agent (which runs them as
// static pods, and needs neither to start); the controllers once the API
// server answers, so that they do not crash-loop (and back off) meanwhile;
// then the node; kube-proxy once its Node (which gives it the node's
// address) is registered; the KubeAPIServer operator, whose first act may
// be to roll out an API server that listens where CoreDNS will reach it (a
// data directory from an older steadyplane starts its last-known-good
// revision, which does not); then the cluster DNS; the readiness
// controller last. The operator, DNS and the readiness controller need the
// controllers' service account tokens and RBAC.
// Components that are switched off are skipped.
var startOrder = []stage{
	{start: []string{etcdComponent, apiserverComponent, nodeComponent}, ready: []string{etcdComponent, apiserverComponent}},
	{start: []string{controllerManagerComponent, schedulerComponent}, ready: []string{controllerManagerComponent, schedulerComponent}},
	{ready: []string{nodeComponent}},
	{start: []string{proxyComponent}, ready: []string{proxyComponent}},
	{start: []string{operatorPod}, ready: []string{operatorPod}},
	{start: []string{dnsComponent}, ready: []string{dnsComponent}},
	{start: []string{readinessPod}, ready: []string{readinessPod}},
}

// stopOrder is startOrder's components in reverse.
func stopOrder() []string {
	var names []string
	for i := len(startOrder) - 1; i >= 0; i-- {
		for j := len(startOrder[i].start) - 1; j >= 0; j-- {
			names = append(names, startOrder[i].start[j])
		}
	}
	return names
}

// enabled says whether this run has the component.
func (cp *ControlPlane) enabled(name string) bool {
	switch name {
	case etcdComponent, apiserverComponent:
		return true
	case controllerManagerComponent, schedulerComponent:
		return cp.ControllerManager != nil
	case nodeComponent:
		return cp.Node != nil
	case operatorPod:
		return cp.fallbackOn()
	case proxyComponent:
		return cp.Proxy != nil
	case dnsComponent:
		return cp.dns != nil
	case readinessPod:
		return cp.Readiness != nil
	}
	return false
}

// beforeStart is what a component needs in the API before it starts.
func (cp *ControlPlane) beforeStart(ctx context.Context, name string) error {
	switch name {
	case dnsComponent:
		return cp.applyDNS(ctx)
	case operatorPod:
		cfg, err := cp.AdminConfig()
		if err != nil {
			return err
		}
		templates, err := cp.fallbackTemplates()
		if err != nil {
			return err
		}
		if err := bootstrap.Publish(ctx, cfg, cp.apiserverLayout(), templates, cp.opts.NodeName, !cp.joined()); err != nil {
			return err
		}
		cp.progressf("starting the KubeAPIServer operator (static pod %s; kubectl get kubeapiserver cluster)", operatorPod)
	case readinessPod:
		client, err := cp.adminClient()
		if err != nil {
			return err
		}
		if err := readinessgates.EnsureRBAC(ctx, client); err != nil {
			return err
		}
		if _, static := cp.launcher.(staticPodLauncher); static {
			cp.progressf("starting readiness-gate webhook and controller (static pod %s)", readinessPod)
		}
	}
	return nil
}

// waitReady waits until the component is ready.
func (cp *ControlPlane) waitReady(ctx context.Context, name string) error {
	switch name {
	case etcdComponent:
		if cp.etcdJoin != nil {
			// A learner is promoted once it caught up; it serves only then.
			if err := cp.afterEtcdStart(ctx); err != nil {
				return err
			}
			return cp.waitEtcd(ctx)
		}
		if err := cp.waitEtcd(ctx); err != nil {
			return err
		}
		return cp.afterEtcdStart(ctx)
	case apiserverComponent:
		if err := cp.WaitAPIServerReady(ctx); err != nil {
			return err
		}
		// The static pods' mirror pods are refused until their
		// RuntimeClass exists.
		client, err := cp.adminClient()
		if err != nil {
			return err
		}
		if err := EnsureHostRuntimeClass(ctx, client); err != nil {
			return err
		}
		return EnsureHostRuntimeClassPolicy(ctx, client)
	case controllerManagerComponent:
		return cp.WaitControllerManagerReady(ctx)
	case schedulerComponent:
		return cp.WaitSchedulerReady(ctx)
	case nodeComponent:
		return cp.WaitNodeReady(ctx)
	case proxyComponent:
		return cp.WaitProxyReady(ctx)
	case dnsComponent:
		return cp.WaitDNSReady(ctx)
	case operatorPod:
		return cp.waitOperatorReady(ctx)
	case readinessPod:
		return cp.WaitReadinessControllerReady(ctx)
	}
	return nil
}

// reportReady prints that the component became ready after d.
func (cp *ControlPlane) reportReady(name string, d time.Duration) {
	s := d.Seconds()
	switch name {
	case etcdComponent:
		cp.progressf("etcd ready in %.1fs (%s)", s, cp.etcdClientURL())
	case apiserverComponent:
		cp.progressf("apiserver ready in %.1fs (%s)", s, cp.APIServerURL())
	case controllerManagerComponent:
		cp.progressf("%s leader in %.1fs", cp.ControllerManager.Name, s)
	case schedulerComponent:
		cp.progressf("%s leader in %.1fs", cp.Scheduler.Name, s)
	case nodeComponent:
		cp.progressf("node %s ready in %.1fs (static pod manifests: %s)", cp.opts.NodeName, s, filepath.Join(cp.dataDir, "manifests"))
	case proxyComponent:
		cp.progressf("kube-proxy (%s mode) ready in %.1fs", cp.proxyMode, s)
	case dnsComponent:
		cp.progressf("cluster DNS ready in %.1fs (Service %s %s, domain %s)", s, clusterdns.ServiceName, cp.dns.ServiceIP, cp.dns.Domain)
	case operatorPod:
		cp.progressf("KubeAPIServer operator ready in %.1fs", s)
	case readinessPod:
		cp.progressf("readiness-gate webhook ready in %.1fs (label a namespace steadyplane.io/readiness-gates to use it)", s)
	}
}

// stages is the start-up order of this run: a server whose etcd member
// joins starts its API server only once the member is promoted (a
// learner serves no reads, and the API server would fail on it meanwhile).
func (cp *ControlPlane) stages() []stage {
	if cp.etcdJoin == nil {
		return startOrder
	}
	joining := []stage{
		{start: []string{etcdComponent, nodeComponent}, ready: []string{etcdComponent}},
		{start: []string{apiserverComponent}, ready: []string{apiserverComponent}},
	}
	return append(joining, startOrder[1:]...)
}

// start runs the start-up order through the launcher.
func (cp *ControlPlane) start(ctx context.Context) error {
	for _, st := range cp.stages() {
		begun := time.Now()
		var names []string
		for _, name := range st.start {
			if !cp.enabled(name) {
				continue
			}
			if err := cp.beforeStart(ctx, name); err != nil {
				return err
			}
			names = append(names, name)
		}
		if err := cp.launcher.Start(ctx, names...); err != nil {
			return err
		}
		for _, name := range st.ready {
			if !cp.enabled(name) {
				continue
			}
			if err := cp.waitReady(ctx, name); err != nil {
				return err
			}
			cp.reportReady(name, time.Since(begun))
		}
	}
	return nil
}
