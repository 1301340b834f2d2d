package controlplane

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMarkControlPlane(t *testing.T) {
	byHand := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	labelled := map[string]string{"kubernetes.io/hostname": "s1", ControlPlaneRoleLabel: ""}
	ours := map[string]string{controlPlaneTaintAnnotation: "up --control-plane-taint"}
	node := func(labels, annotations map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s1", Labels: labels, Annotations: annotations}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	for _, tc := range []struct {
		name    string
		in      *corev1.Node
		taint   bool
		want    *corev1.Node
		changed bool
	}{
		{"a new Node gets the role", node(map[string]string{"kubernetes.io/hostname": "s1"}, nil), false,
			node(labelled, nil), true},
		{"a Node without labels gets the role", node(nil, nil), false,
			node(map[string]string{ControlPlaneRoleLabel: ""}, nil), true},
		{"marked already: no write", node(labelled, nil), false, node(labelled, nil), false},
		{"tainted on request, beside a taint by hand", node(labelled, nil, byHand), true,
			node(labelled, ours, byHand, controlPlaneTaint), true},
		{"tainted already by up: no write", node(labelled, ours, controlPlaneTaint), true,
			node(labelled, ours, controlPlaneTaint), false},
		{"the same taint put by hand is left, not claimed, when asked for", node(labelled, nil, controlPlaneTaint), true,
			node(labelled, nil, controlPlaneTaint), false},
		{"up's annotation without its taint (taken off by hand) is dropped without the flag", node(labelled, ours), false,
			node(labelled, map[string]string{}), true},
		{"up's annotation without its taint: the taint is put back with the flag", node(labelled, ours), true,
			node(labelled, ours, controlPlaneTaint), true},
		{"up's taint taken off without the flag, the one by hand kept", node(labelled, ours, byHand, controlPlaneTaint), false,
			node(labelled, map[string]string{}, byHand), true},
		{"a control-plane taint put by hand stays without the flag", node(labelled, nil, controlPlaneTaint), false,
			node(labelled, nil, controlPlaneTaint), false},
		{"a PreferNoSchedule taint of the same key is not up's", node(labelled, nil, corev1.Taint{Key: ControlPlaneRoleLabel, Effect: corev1.TaintEffectPreferNoSchedule}), true,
			node(labelled, ours, corev1.Taint{Key: ControlPlaneRoleLabel, Effect: corev1.TaintEffectPreferNoSchedule}, controlPlaneTaint), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in.DeepCopy()
			got, changed := MarkControlPlane(tc.in, tc.taint)
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got labels %v annotations %v taints %v\nwant labels %v annotations %v taints %v",
					got.Labels, got.Annotations, got.Spec.Taints, tc.want.Labels, tc.want.Annotations, tc.want.Spec.Taints)
			}
			if !reflect.DeepEqual(tc.in, before) {
				t.Errorf("the Node given was modified")
			}
		})
	}
}
