package staticpod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: local
    command: ["sleep", "3600"]
`

func TestParse(t *testing.T) {
	p, err := Parse([]byte(good), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "web-n1" || p.Namespace != "default" || p.Spec.NodeName != "n1" || string(p.UID) != Hash([]byte(good), "n1") || p.Annotations[SourceAnnotation] != "file" {
		t.Errorf("parsed %s/%s uid %s annotations %v", p.Namespace, p.Name, p.UID, p.Annotations)
	}
	m := Mirror(p, "n1", "node-uid")
	if m.Annotations[MirrorAnnotation] != string(p.UID) || m.UID != "" || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Kind != "Node" {
		t.Errorf("mirror: %+v", m.ObjectMeta)
	}
	if p2, _ := Parse([]byte(strings.Replace(good, "3600", "3601", 1)), "n1"); p2.UID == p.UID {
		t.Error("an edit kept the UID")
	}
	bad := []struct{ name, in, want string }{
		{"not yaml", "{{{", "not a Kubernetes object"},
		{"not a pod", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n", "not a v1 Pod"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec: {}\n", "no containers"},
		{"no command", strings.Replace(good, `    command: ["sleep", "3600"]`+"\n", "", 1), "no command"},
		{"bad name", strings.Replace(good, "name: web", "name: Web_1", 1), "pod name"},
		{"empty", "", "not a Kubernetes object"},
		{"too big", strings.Repeat("#", MaxManifestSize+1), "over the"},
	}
	for _, b := range bad {
		if _, err := Parse([]byte(b.in), "n1"); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", b.name, err, b.want)
		}
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(good), 0o600)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("kind: ["), 0o600)
	os.WriteFile(filepath.Join(dir, ".swp.yaml"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600)
	rs, err := LoadDir(dir, "n1")
	if err != nil || len(rs) != 2 {
		t.Fatalf("LoadDir = %d results, %v", len(rs), err)
	}
	if rs[0].Err != nil || rs[0].Pod == nil || rs[1].Err == nil || !strings.Contains(rs[1].Err.Error(), "b.yaml") || rs[1].Hash == "" {
		t.Errorf("results: %+v / %+v", rs[0], rs[1])
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","command":["true"]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "n1")
		if err == nil && (p == nil || len(p.Spec.Containers) == 0 || p.UID == "") {
			t.Fatalf("accepted an unusable pod from %q", data)
		}
	})
}
