// Package lbgate is one real readiness gate built on conditionctl:
// steadyplane.io/load-balancer-ready is True while an HTTP check from outside
// the pod succeeds, the way a cloud load balancer reports its targets'
// health. The pod says where to check in annotations.
package lbgate

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/readinessgates/conditionctl"
)

// ConditionType is the condition, and readiness gate, this package owns.
const ConditionType corev1.PodConditionType = "steadyplane.io/load-balancer-ready"

// Annotations that say where the check goes: GET http://<podIP>:<port><path>.
// Without a port annotation, the first containerPort of the pod is used;
// without a path, "/".
const (
	PortAnnotation = "steadyplane.io/load-balancer-port"
	PathAnnotation = "steadyplane.io/load-balancer-path"
)

// Reasons of the condition.
const (
	ReasonHealthy        = "TargetHealthy"
	ReasonUnhealthy      = "TargetUnhealthy"
	ReasonNoTarget       = "NoTarget"
	ReasonNotYetAssigned = "PodHasNoIP"
	// ReasonOutsidePodNetwork: the pod's address is neither in the cluster's
	// pod range nor its node's (hostNetwork), so it is not checked.
	ReasonOutsidePodNetwork = "OutsidePodNetwork"
)

// Allowed tells whether the gate may send a check to the pod's address:
// one in the cluster's pod ranges, or for a hostNetwork pod its node's
// address (both written by the node, not by the pod's author). No other
// pod address is ever dialled, whatever the pod says (the data path reads
// kube-proxy at the Nodes' InternalIPs, DataPathCheck).
func Allowed(pod *corev1.Pod, podCIDRs []*net.IPNet) error {
	ip := net.ParseIP(pod.Status.PodIP)
	if ip == nil {
		return fmt.Errorf("pod IP %q is not an address", pod.Status.PodIP)
	}
	if pod.Spec.HostNetwork && pod.Status.PodIP == pod.Status.HostIP {
		return nil
	}
	for _, n := range podCIDRs {
		if n.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("pod IP %s is outside the cluster's pod network; it is not checked", ip)
}

// Target returns the URL the check GETs for pod.
func Target(pod *corev1.Pod) (string, error) {
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("pod has no IP yet")
	}
	port := 0
	if v, ok := pod.Annotations[PortAnnotation]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("annotation %s=%q is not a port", PortAnnotation, v)
		}
		port = n
	} else {
		for _, c := range pod.Spec.Containers {
			if len(c.Ports) > 0 {
				port = int(c.Ports[0].ContainerPort)
				break
			}
		}
	}
	if port == 0 {
		return "", fmt.Errorf("no port: set annotation %s or a containerPort", PortAnnotation)
	}
	path := pod.Annotations[PathAnnotation]
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + path, nil
}

// Check GETs the pod's target, if Allowed: 2xx and 3xx are healthy.
func Check(ctx context.Context, client *http.Client, pod *corev1.Pod, podCIDRs []*net.IPNet) conditionctl.Result {
	if pod.Status.PodIP == "" {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonNotYetAssigned, Message: "the pod has no IP yet"}
	}
	if err := Allowed(pod, podCIDRs); err != nil {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonOutsidePodNetwork, Message: err.Error()}
	}
	url, err := Target(pod)
	if err != nil {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonNoTarget, Message: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonUnhealthy, Message: err.Error()}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return conditionctl.Result{Status: corev1.ConditionFalse, Reason: ReasonUnhealthy, Message: fmt.Sprintf("GET %s: status %d", url, resp.StatusCode)}
	}
	return conditionctl.Result{Status: corev1.ConditionTrue, Reason: ReasonHealthy, Message: fmt.Sprintf("GET %s: status %d", url, resp.StatusCode)}
}

// HTTPClient is the client checks use: no keep-alive (each check is a fresh
// connection, as a load balancer's health check is), no redirects followed.
func HTTPClient() *http.Client {
	return &http.Client{
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
