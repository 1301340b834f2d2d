package controlplane

import (
	"context"
	"time"
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
	{start: []string{readinessPod, addonsPod, metricsComponent}, ready: []string{readinessPod, addonsPod, metricsComponent}},
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

// start runs the start-up order through the launcher. Once the first
// stage has started, the add-ons' image is made in the background, so that
// it is ready by the DNS's turn without holding up the API server.
func (cp *ControlPlane) start(ctx context.Context) error {
	for i, st := range cp.stages() {
		if err := cp.startStage(ctx, st); err != nil {
			return err
		}
		if i == 0 {
			cp.startAddonImage()
		}
	}
	return nil
}

// startStage starts the enabled components of st (what each needs in the
// API first), then waits for each of st.ready and reports it.
func (cp *ControlPlane) startStage(ctx context.Context, st stage) error {
	begun := time.Now()
	var names []string
	for _, name := range st.start {
		c := componentNamed(name)
		if !c.enabled(cp) {
			continue
		}
		if c.beforeStart != nil {
			if err := c.beforeStart(cp, ctx); err != nil {
				return err
			}
		}
		names = append(names, name)
	}
	if err := cp.launcher.Start(ctx, names...); err != nil {
		return err
	}
	for _, name := range st.ready {
		c := componentNamed(name)
		if !c.enabled(cp) {
			continue
		}
		if err := c.ready(cp, ctx); err != nil {
			return err
		}
		cp.progressf("%s", c.report(cp, time.Since(begun).Seconds()))
	}
	return nil
}
