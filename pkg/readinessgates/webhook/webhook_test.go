package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func ns(ann string, set bool) *corev1.Namespace {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	if set {
		n.Annotations = map[string]string{PolicyKey: ann}
	}
	return n
}

func TestGatesFor(t *testing.T) {
	tests := []struct {
		name     string
		ns       *corev1.Namespace
		want     []string
		warnings int
	}{
		{"no annotation: the load balancer gate", ns("", false), []string{"steadyplane.io/load-balancer-ready"}, 0},
		{"empty annotation", ns(" ", true), []string{"steadyplane.io/load-balancer-ready"}, 0},
		{"listed", ns("example.com/a, example.com/b,", true), []string{"example.com/a", "example.com/b"}, 0},
		{"invalid name warned and left out", ns("example.com/a,Not Valid!", true), []string{"example.com/a"}, 1},
	}
	for _, tt := range tests {
		got, w := GatesFor(tt.ns)
		if !reflect.DeepEqual(got, tt.want) || len(w) != tt.warnings {
			t.Errorf("%s: %v %v, want %v and %d warnings", tt.name, got, w, tt.want, tt.warnings)
		}
	}
}

func TestPatch(t *testing.T) {
	withGates := func(g ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, x := range g {
			p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: corev1.PodConditionType(x)})
		}
		return p
	}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		gates []string
		want  string
	}{
		{"none yet", withGates(), []string{"a/x", "a/y"}, `[{"op":"add","path":"/spec/readinessGates","value":[{"conditionType":"a/x"},{"conditionType":"a/y"}]}]`},
		{"some present", withGates("a/x"), []string{"a/x", "a/y"}, `[{"op":"add","path":"/spec/readinessGates/-","value":{"conditionType":"a/y"}}]`},
		{"all present", withGates("a/x"), []string{"a/x"}, ``},
		{"duplicates asked", withGates(), []string{"a/x", "a/x"}, `[{"op":"add","path":"/spec/readinessGates","value":[{"conditionType":"a/x"}]}]`},
	}
	for _, tt := range tests {
		got, err := Patch(tt.pod, tt.gates)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: %s %v, want %s", tt.name, got, err, tt.want)
		}
	}
}

func review(t testing.TB, kind string, op admissionv1.Operation, pod *corev1.Pod) []byte {
	raw, _ := json.Marshal(pod)
	b, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "rid", Kind: metav1.GroupVersionKind{Version: "v1", Kind: kind}, Operation: op, Namespace: "team", Object: runtime.RawExtension{Raw: raw}},
	})
	return b
}

func serve(h http.Handler, body []byte) (*httptest.ResponseRecorder, *admissionv1.AdmissionResponse) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	var out admissionv1.AdmissionReview
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w, out.Response
}

func TestHandler(t *testing.T) {
	h := &Handler{Namespace: func(_ context.Context, name string) (*corev1.Namespace, error) { return ns("example.com/a", true), nil }}
	_, resp := serve(h, review(t, "Pod", admissionv1.Create, &corev1.Pod{}))
	if resp == nil || !resp.Allowed || resp.UID != "rid" || !strings.Contains(string(resp.Patch), "example.com/a") || resp.PatchType == nil {
		t.Errorf("pod creation: %+v", resp)
	}
	_, resp = serve(h, review(t, "Pod", admissionv1.Update, &corev1.Pod{}))
	if resp == nil || !resp.Allowed || resp.Patch != nil {
		t.Errorf("an update was patched: %+v", resp)
	}
	broken := &Handler{Namespace: func(context.Context, string) (*corev1.Namespace, error) { return nil, errors.New("boom") }}
	_, resp = serve(broken, review(t, "Pod", admissionv1.Create, &corev1.Pod{}))
	if resp == nil || !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("a namespace look-up failure must allow with a warning: %+v", resp)
	}
	if w, _ := serve(h, []byte("{not json")); w.Code != http.StatusBadRequest {
		t.Errorf("garbage answered %d", w.Code)
	}
	if w, _ := serve(h, bytes.Repeat([]byte(" "), maxReview+10)); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized body answered %d", w.Code)
	}
}

func FuzzHandler(f *testing.F) {
	f.Add(review(f, "Pod", admissionv1.Create, &corev1.Pod{}))
	f.Add([]byte(`{"request":{"kind":{"kind":"Pod"},"operation":"CREATE","object":{"spec":{"readinessGates":[{}]}}}}`))
	h := &Handler{Namespace: func(context.Context, string) (*corev1.Namespace, error) { return ns("a/b,c", true), nil }}
	f.Fuzz(func(t *testing.T, body []byte) {
		w, resp := serve(h, body)
		if w.Code == http.StatusOK && (resp == nil || !resp.Allowed) {
			t.Fatalf("a 200 answer must allow: %s", w.Body.Bytes())
		}
	})
}
