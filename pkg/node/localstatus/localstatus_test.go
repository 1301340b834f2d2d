package localstatus

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestRead(t *testing.T) {
	for _, tt := range []struct {
		name    string
		content *string
		wantErr string
		wantUID string
	}{
		{name: "no record", content: nil},
		{name: "a record", content: ptr(`{"namespace":"kube-system","name":"kube-apiserver-n","uid":"u1","startAttempts":{"kube-apiserver":2}}`), wantUID: "u1"},
		{name: "torn file", content: ptr(`{"namespace":"kube-sys`), wantErr: "is not a pod record"},
		{name: "empty file", content: ptr(``), wantErr: "is not a pod record"},
		{name: "too large", content: ptr(`"` + strings.Repeat("x", maxRecordSize) + `"`), wantErr: "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.content != nil {
				if err := os.WriteFile(filepath.Join(dir, FileName), []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Read(dir)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("Read = %v, want an error naming the file with %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case tt.wantUID == "" && p != nil:
				t.Fatalf("Read = %+v, want nil", p)
			case tt.wantUID != "" && (p == nil || string(p.UID) != tt.wantUID):
				t.Fatalf("Read = %+v, want uid %s", p, tt.wantUID)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestStore checks that records are written 0600 only when they change and
// served as a PodList and as records.
func TestStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods", "ns_p_u1")
	s := NewStore()
	rec := &Pod{Namespace: "ns", Name: "p", UID: "u1", Static: true, StartAttempts: map[string]int32{"c": 1},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 0}}}}
	if err := s.Put(dir, rec); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, want 0600", st.Mode().Perm())
	}
	// An unchanged record is not written again: remove the file and see
	// that Put leaves it absent.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	same := *rec
	if err := s.Put(dir, &same); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("an unchanged record was written again (%v)", err)
	}
	changed := *rec
	changed.StartAttempts = map[string]int32{"c": 2}
	if err := s.Put(dir, &changed); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(dir); err != nil || got.StartAttempts["c"] != 2 {
		t.Fatalf("Read after a change = %+v, %v; want 2 attempts", got, err)
	}

	// A pod of the API is kept, and not served without authentication.
	if err := s.Put(filepath.Join(t.TempDir(), "pods", "ns_api_u2"), &Pod{Namespace: "ns", Name: "api", UID: "u2",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"env":[{"name":"TOKEN","value":"s3cret"}]}`}}); err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 2 {
		t.Fatalf("%d records kept, want 2", len(s.List()))
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var list corev1.PodList
	get(t, srv.URL+"/pods", &list)
	if list.Kind != "PodList" || len(list.Items) != 1 || list.Items[0].Name != "p" {
		t.Errorf("/pods = %+v, want a PodList with p", list)
	}
	var recs []Pod
	get(t, srv.URL+"/localstatus/pods", &recs)
	if len(recs) != 1 || recs[0].StartAttempts["c"] != 2 {
		t.Errorf("/localstatus/pods = %+v, want p with 2 attempts", recs)
	}
	resp, err := http.Post(srv.URL+"/pods", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /pods = %d, want 405: the endpoint is read-only", resp.StatusCode)
	}
	s.Forget("u1")
	get(t, srv.URL+"/localstatus/pods", &recs)
	if len(recs) != 0 {
		t.Errorf("after Forget: %d records, want 0", len(recs))
	}
}

func get(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}
