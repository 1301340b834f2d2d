package controlplane

import (
	"slices"
	"testing"
)

// TestStartOrder checks the start-up order's rules: every component is
// started once, before or in the stage that waits for it, and waited for
// once; the controllers start only after the API server is ready; the
// operator and the readiness controller after the controllers.
func TestStartOrder(t *testing.T) {
	startedIn, readyIn := map[string]int{}, map[string]int{}
	for i, st := range startOrder {
		for _, name := range st.start {
			if _, dup := startedIn[name]; dup {
				t.Errorf("%s is started twice", name)
			}
			startedIn[name] = i
		}
		for _, name := range st.ready {
			if _, dup := readyIn[name]; dup {
				t.Errorf("%s is waited for twice", name)
			}
			readyIn[name] = i
		}
	}
	for _, c := range components {
		name := c.name
		s, started := startedIn[name]
		r, waited := readyIn[name]
		if !started || !waited {
			t.Errorf("%s: started %v, waited for %v; want both", name, started, waited)
			continue
		}
		if s > r {
			t.Errorf("%s is waited for in stage %d before it starts in stage %d", name, r, s)
		}
	}
	after := func(later, earlier string) {
		if startedIn[later] <= readyIn[earlier] {
			t.Errorf("%s starts in stage %d, not after %s is ready (stage %d)", later, startedIn[later], earlier, readyIn[earlier])
		}
	}
	after(controllerManagerComponent, apiserverComponent)
	after(schedulerComponent, apiserverComponent)
	after(operatorPod, controllerManagerComponent)
	after(readinessPod, controllerManagerComponent)
	after(proxyComponent, nodeComponent)
	after(dnsComponent, proxyComponent)
	// The node agent runs etcd and the API server as static pods.
	if startedIn[nodeComponent] != startedIn[etcdComponent] || startedIn[nodeComponent] != startedIn[apiserverComponent] {
		t.Errorf("the node agent starts in stage %d, etcd in %d, the API server in %d; want one stage", startedIn[nodeComponent], startedIn[etcdComponent], startedIn[apiserverComponent])
	}
}

func TestStopOrderIsTheStartOrderReversed(t *testing.T) {
	var started []string
	for _, st := range startOrder {
		started = append(started, st.start...)
	}
	stop := stopOrder()
	slices.Reverse(stop)
	if !slices.Equal(stop, started) {
		t.Errorf("stop order reversed %v, want the start order %v", stop, started)
	}
}

// TestComponentTable checks the table's rows against their kinds: what
// runs as a process or a pod has one, what the node agent is has no pod,
// and every row can be waited for and reported.
func TestComponentTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range components {
		if seen[c.name] {
			t.Errorf("%s is in the table twice", c.name)
		}
		seen[c.name] = true
		switch c.kind {
		case hostComponent:
			if c.process == nil || c.pod == nil {
				t.Errorf("%s runs as a process or a static pod: process %v, pod %v", c.name, c.process != nil, c.pod != nil)
			}
		case agentComponent:
			if c.process == nil || c.pod != nil {
				t.Errorf("%s is the node agent: a process, no pod", c.name)
			}
		case podOnly:
			if c.process != nil || c.pod == nil {
				t.Errorf("%s runs only as a static pod", c.name)
			}
		case apiObjects:
			if c.process != nil || c.pod != nil || c.beforeStart == nil {
				t.Errorf("%s is objects in the API, written before it starts", c.name)
			}
		}
		if c.enabled == nil || c.ready == nil || c.report == nil {
			t.Errorf("%s: enabled, ready and report are every row's", c.name)
		}
	}
	if len(seen) != len(stopOrder()) {
		t.Errorf("the table has %d components, the start order %d", len(seen), len(stopOrder()))
	}
}
