package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

func (a *Agent) registerNode(ctx context.Context) error {
	labels := map[string]string{
		"kubernetes.io/hostname": a.opts.NodeName, "kubernetes.io/os": goruntime.GOOS, "kubernetes.io/arch": goruntime.GOARCH,
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName, Labels: labels}}
	created, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		created, err = a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Node %s: %w", a.opts.NodeName, err)
		}
		// A Node made before the agent (a joining server's, made with its
		// pod range) gets the labels the scheduler's topology needs, as
		// the kubelet reconciles its default labels.
		if missing := MissingLabels(created.Labels, labels); len(missing) > 0 {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
			if created, err = a.client.CoreV1().Nodes().Patch(ctx, a.opts.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("labelling Node %s: %w", a.opts.NodeName, err)
			}
		}
	case err != nil:
		return fmt.Errorf("registering Node %s: %w", a.opts.NodeName, err)
	}
	a.mu.Lock()
	a.node = created
	a.mu.Unlock()
	return a.writeNodeStatus(ctx)
}

func (a *Agent) writeNodeStatus(ctx context.Context) error {
	now := metav1.Now()
	hostname, _ := os.Hostname()
	capacity := a.allocatable()
	status := corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.opts.NodeIP}, {Type: corev1.NodeHostName, Address: hostname}},
		Conditions: append(pressureConditions(a.readNodeStats(), a.opts.EvictionHard), corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "steadyplane node agent is posting ready status",
		}),
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: a.apiPort()}},
		NodeInfo:        nodeInfo(a.opts.Runtime.Name()),
	}
	if a.opts.Images != nil {
		if imgs, err := a.opts.Images.List(); err == nil {
			status.Images = nodeImages(imgs)
		}
	}
	a.mu.Lock()
	node := a.node.DeepCopy()
	a.mu.Unlock()
	status.Conditions = withTransitions(status.Conditions, node.Status.Conditions, now)
	node.Status = status
	updated, err := a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing Node %s status: %w", a.opts.NodeName, err)
	}
	a.mu.Lock()
	a.node = updated
	a.mu.Unlock()
	if a.opts.Network != nil {
		if msg := PodCIDRMismatch(updated.Spec.PodCIDR, a.opts.Network.PodCIDR()); msg != "" && !a.cidrWarned.Swap(true) {
			klog.InfoS("WARNING: "+msg, "node", a.opts.NodeName)
			a.nodeEvent(corev1.EventTypeWarning, "PodCIDRMismatch", "%s", msg)
		}
	}
	return nil
}

// MissingLabels are the labels of want that are absent from, or
// differ in, have.
func MissingLabels(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range want {
		if have[k] != v {
			out[k] = v
		}
	}
	return out
}

// PodCIDRMismatch says why the Node's allocated pod range (spec.podCIDR)
// and the range the agent gives pods addresses from disagree, or "" when
// they agree or nothing is allocated yet.
func PodCIDRMismatch(allocated, configured string) string {
	if allocated == "" {
		return ""
	}
	_, a, errA := net.ParseCIDR(allocated)
	_, c, errC := net.ParseCIDR(configured)
	if errA == nil && errC == nil && a.String() == c.String() {
		return ""
	}
	return fmt.Sprintf("the Node's spec.podCIDR is %s but this agent gives pods addresses from --pod-cidr=%s; restart the agent with --pod-cidr=%s", allocated, configured, allocated)
}

func (a *Agent) heartbeat(ctx context.Context) {
	wait.UntilWithContext(ctx, a.writeHeartbeat, a.opts.StatusInterval)
}

// writeHeartbeat writes the Node's status; after a failure (a conflict, most
// likely) it reads the Node again for the next turn.
func (a *Agent) writeHeartbeat(ctx context.Context) {
	err := a.writeNodeStatus(ctx)
	if err == nil || ctx.Err() != nil {
		return
	}
	klog.ErrorS(err, "Node heartbeat")
	if latest, gerr := a.client.CoreV1().Nodes().Get(ctx, a.opts.NodeName, metav1.GetOptions{}); gerr == nil {
		a.mu.Lock()
		a.node = latest
		a.mu.Unlock()
	}
}

// setLeaseOwner makes the Node own its Lease, as the kubelet does, so the
// Lease goes when the Node does.
func (a *Agent) setLeaseOwner(l *coordinationv1.Lease) error {
	a.mu.Lock()
	node := a.node
	a.mu.Unlock()
	if node == nil || len(l.OwnerReferences) > 0 {
		return nil
	}
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	return nil
}

func (a *Agent) nodeRef() (string, types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.node == nil {
		return a.opts.NodeName, ""
	}
	return a.node.Name, a.node.UID
}

// apiPort is the node API's port as the Node publishes it; 0 for none.
func (a *Agent) apiPort() int32 {
	_, port, err := net.SplitHostPort(a.opts.APIAddress)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(port)
	return int32(n)
}

// allocatable is what the node offers pods: its CPUs, memory and 110 pods.
func (a *Agent) allocatable() corev1.ResourceList {
	cpu := resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)
	return corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: memory(), corev1.ResourcePods: resource.MustParse("110")}
}

func memory() resource.Quantity {
	var total int64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			total = kb * 1024
		}
	}
	return *resource.NewQuantity(total, resource.BinarySI)
}
