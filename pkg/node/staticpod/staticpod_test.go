package staticpod

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec: {}\n", "spec.containers: Required value"},
		// What only upstream's validation catches.
		{"no image", strings.Replace(good, "    image: local\n", "", 1), "image: Required value"},
		{"bad restart policy", strings.Replace(good, "spec:\n", "spec:\n  restartPolicy: Sometimes\n", 1), "restartPolicy: Unsupported value"},
		{"two containers of one name", good + "  - name: c\n    image: local\n    command: [\"true\"]\n", "Duplicate value"},
		{"a Secret volume", good + "  volumes:\n  - name: s\n    secret:\n      secretName: x\n", "may not reference secrets"},
		{"a bad port", strings.Replace(good, "    command:", "    ports:\n    - containerPort: 70000\n    command:", 1), "containerPort"},
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

func TestLoadDirReadsOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(good), 0o600)
	os.Symlink(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "link.yaml"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "huge.yaml"), []byte(good+strings.Repeat("#", MaxManifestSize)), 0o600)
	done := make(chan []Result, 1)
	go func() {
		rs, _ := LoadDir(dir, "n1")
		done <- rs
	}()
	var rs []Result
	select {
	case rs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("LoadDir blocked (on the FIFO?)")
	}
	want := map[string]string{"a.yaml": "", "fifo.yaml": "not a regular file", "huge.yaml": "over the", "link.yaml": "symbolic link"}
	if len(rs) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(rs), len(want), rs)
	}
	for _, r := range rs {
		w := want[filepath.Base(r.File)]
		if w == "" && r.Err != nil || w != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), w)) {
			t.Errorf("%s: %v, want %q", filepath.Base(r.File), r.Err, w)
		}
	}
}

func TestDesired(t *testing.T) {
	p := func(file, name string) Result {
		pod, err := Parse([]byte(strings.Replace(good, "name: web", "name: "+name, 1)), "n1")
		if err != nil {
			t.Fatal(err)
		}
		return Result{File: file, Pod: pod}
	}
	broken := Result{File: "/m/c.yaml", Err: errors.New("/m/c.yaml: not a Kubernetes object")}
	tests := []struct {
		name        string
		results     []Result
		owners      map[string]string
		wantWeb     string // file that defines web, "" for none
		wantRefused []string
	}{
		{"first file by name", []Result{p("/m/a.yaml", "web"), p("/m/b.yaml", "web"), broken, p("/m/d.yaml", "db")}, nil, "/m/a.yaml", []string{"/m/c.yaml", "/m/b.yaml"}},
		{"the running pod keeps its name against a newcomer", []Result{p("/m/a.yaml", "web"), p("/m/b.yaml", "web")}, map[string]string{"default/web-n1": "/m/b.yaml"}, "/m/b.yaml", []string{"/m/a.yaml"}},
		{"its file invalid: the other file takes the name", []Result{p("/m/a.yaml", "web"), {File: "/m/b.yaml", Err: errors.New("bad")}}, map[string]string{"default/web-n1": "/m/b.yaml"}, "/m/a.yaml", []string{"/m/b.yaml"}},
		{"its file invalid and alone: not desired", []Result{{File: "/m/b.yaml", Err: errors.New("bad")}}, map[string]string{"default/web-n1": "/m/b.yaml"}, "", []string{"/m/b.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, files, refused := Desired(tt.results, tt.owners)
			if got := files["default/web-n1"]; got != tt.wantWeb || (tt.wantWeb != "") != (pods["default/web-n1"] != nil) {
				t.Errorf("web from %q, want %q", got, tt.wantWeb)
			}
			var gotRefused []string
			for _, r := range refused {
				gotRefused = append(gotRefused, r.File)
				if r.Err == nil {
					t.Errorf("refusal of %s without a reason", r.File)
				}
			}
			if strings.Join(gotRefused, ",") != strings.Join(tt.wantRefused, ",") {
				t.Errorf("refused %v, want %v", gotRefused, tt.wantRefused)
			}
		})
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
