package conditionctl

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConditionPatch(t *testing.T) {
	const ct = corev1.PodConditionType("example.com/ready")
	then, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	pod := func(conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Status: corev1.PodStatus{Conditions: conds}}
	}
	tests := []struct {
		name      string
		pod       *corev1.Pod
		r         Result
		wantNil   bool
		wantTrans metav1.Time
	}{
		{"new condition", pod(), Result{Status: corev1.ConditionTrue}, false, now},
		{"no change: no patch", pod(corev1.PodCondition{Type: ct, Status: corev1.ConditionTrue, LastTransitionTime: then}), Result{Status: corev1.ConditionTrue}, true, metav1.Time{}},
		{"status change: new transition time", pod(corev1.PodCondition{Type: ct, Status: corev1.ConditionFalse, LastTransitionTime: then}), Result{Status: corev1.ConditionTrue}, false, now},
		{"message change only: transition time kept", pod(corev1.PodCondition{Type: ct, Status: corev1.ConditionFalse, Message: "a", LastTransitionTime: then}), Result{Status: corev1.ConditionFalse, Message: "b"}, false, then},
		{"other conditions ignored", pod(corev1.PodCondition{Type: "Ready", Status: corev1.ConditionTrue}), Result{Status: corev1.ConditionFalse, Reason: "R"}, false, now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ConditionPatch(tt.pod, ct, tt.r, now)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNil {
				if b != nil {
					t.Errorf("patch %s, want none", b)
				}
				return
			}
			var p struct {
				Metadata struct{ UID string }
				Status   struct{ Conditions []corev1.PodCondition }
			}
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			if p.Metadata.UID != "u1" || len(p.Status.Conditions) != 1 {
				t.Fatalf("patch %s: want the UID precondition and one condition", b)
			}
			c := p.Status.Conditions[0]
			if c.Type != ct || c.Status != tt.r.Status || c.Reason != tt.r.Reason || c.Message != tt.r.Message || !c.LastTransitionTime.Equal(&tt.wantTrans) {
				t.Errorf("condition %+v, want %v with transition %v", c, tt.r, tt.wantTrans)
			}
		})
	}
}

func TestHasGate(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "a"}}}}
	if !HasGate(p, "a") || HasGate(p, "b") {
		t.Error("HasGate")
	}
}

func TestNextCheck(t *testing.T) {
	for _, tt := range []struct {
		status            corev1.ConditionStatus
		interval, pending time.Duration
		want              time.Duration
	}{
		{corev1.ConditionTrue, 5 * time.Second, 500 * time.Millisecond, 5 * time.Second},
		{corev1.ConditionFalse, 5 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
		{corev1.ConditionUnknown, 5 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
		{corev1.ConditionFalse, 200 * time.Millisecond, 500 * time.Millisecond, 200 * time.Millisecond},
	} {
		if got := NextCheck(tt.status, tt.interval, tt.pending); got != tt.want {
			t.Errorf("NextCheck(%s, %v, %v) = %v, want %v", tt.status, tt.interval, tt.pending, got, tt.want)
		}
	}
}
