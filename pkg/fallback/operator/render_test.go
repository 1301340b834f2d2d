package operator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/steadyplane/steadyplane/pkg/fallback"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/revisions"
)

// One revision, rendered for two nodes from their own templates: each
// rendering carries the spec, its node's paths and its templates' hash.
func TestRender(t *testing.T) {
	in := Inputs{Spec: v1alpha1.KubeAPIServerSpec{ExtraArgs: []string{"--v=3"}}, ConfigMaps: map[string]map[string]string{}, Secrets: map[string]map[string][]byte{}}
	rev := RevisionConfigMap(in, 7, "test")
	other := map[string]string{
		OperandKey:   strings.Replace(syncTemplates[OperandKey], "image: a", "image: a\n    command: [/b/steadyplane, apiserver, --bind-address=10.0.0.2]", 1),
		MonitorKey:   syncTemplates[MonitorKey],
		InstallerKey: syncTemplates[InstallerKey],
	}
	for node, templates := range map[string]map[string]string{"n": syncTemplates, "m": other} {
		r, err := Render(rev, templates, node)
		if err != nil {
			t.Fatal(err)
		}
		if r.Name != "kube-apiserver-pod-7-"+node || r.Labels[NodeLabel] != node || r.Labels[RevisionLabel] != "7" || r.Annotations[TemplatesHashAnnotation] != TemplatesHash(templates) {
			t.Errorf("%s: rendering %s labels %v annotations %v", node, r.Name, r.Labels, r.Annotations)
		}
		pod, err := revisions.DecodeManifest([]byte(r.Data[RevisionOperandKey]))
		if err != nil {
			t.Fatal(err)
		}
		cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
		if pod.Annotations[fallback.RevisionAnnotation] != "7" || !strings.HasSuffix(cmd, "--v=3") {
			t.Errorf("%s: operand annotations %v, command %q", node, pod.Annotations, cmd)
		}
		if node == "m" != strings.Contains(cmd, "--bind-address=10.0.0.2") {
			t.Errorf("%s: the command %q is not the node's own", node, cmd)
		}
		if !strings.Contains(r.Data[RevisionMonitorKey], "--revision=7") {
			t.Errorf("%s: monitor:\n%s", node, r.Data[RevisionMonitorKey])
		}
	}
	if Latest(nil) != nil || Find(nil, 7) != nil {
		t.Error("a revision found among none")
	}

	// A revision made before renderings has no spec: rendering it says so.
	old := rev.DeepCopy()
	delete(old.Data, RevisionSpecKey)
	if _, err := Render(old, syncTemplates, "n"); err == nil || !strings.Contains(err.Error(), "a new revision is needed") {
		t.Errorf("an old revision rendered: %v", err)
	}
	broken := map[string]string{OperandKey: "not: [a pod", MonitorKey: syncTemplates[MonitorKey], InstallerKey: syncTemplates[InstallerKey]}
	if _, err := Render(rev, broken, "n"); err == nil || !strings.Contains(err.Error(), "node n") {
		t.Errorf("broken templates rendered: %v", err)
	}
	if _, err := Render(rendering(t, rev), syncTemplates, "n"); err == nil {
		t.Error("a rendering was taken for a revision")
	}
}

func rendering(t *testing.T, rev *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	r, err := Render(rev, syncTemplates, "n")
	if err != nil {
		t.Fatal(err)
	}
	return r
}
