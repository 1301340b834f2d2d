package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/steadyplane/steadyplane/pkg/binary"
	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
)

// TestFetchFrom installs a served binary only when its content is the
// digest asked for.
func TestFetchFrom(t *testing.T) {
	good := []byte("release v0.2.0")
	sum := sha256.Sum256(good)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	serve := func(body []byte, code int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(code)
			_, _ = w.Write(body)
		}))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		body []byte
		code int
		want string // "" for success
	}{
		{"the release", good, 200, ""},
		{"another content", []byte("a binary somebody swapped"), 200, "not installed"},
		{"a truncated copy", good[:5], 200, "not installed"},
		{"a node without it", []byte("not found"), 404, "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(tc.body, tc.code)
			defer srv.Close()
			bin := t.TempDir()
			path, err := fetchFrom(ctx, srv.Client(), srv.URL, bin, digest)
			entries, _ := os.ReadDir(bin)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("fetchFrom = %q, %v; want an error saying %q", path, err, tc.want)
				}
				if len(entries) != 0 {
					t.Fatalf("a refused fetch left %v in bin", entries)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(bin, binary.Prefix+digest[len("sha256:"):][:12]); path != want {
				t.Errorf("installed as %s, want %s", path, want)
			}
			if found, err := binary.Find(bin, digest); err != nil || found != path {
				t.Errorf("binary.Find after the fetch = %q, %v", found, err)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != binary.Mode {
				t.Errorf("installed copy: %v, %v; want mode %o", st, err, binary.Mode)
			}
			if len(entries) != 1 {
				t.Errorf("bin holds %d files after the fetch, want the copy alone", len(entries))
			}
		})
	}
	if _, err := fetchFrom(ctx, http.DefaultClient, "http://127.0.0.1:1", t.TempDir(), "sha256:short"); err == nil {
		t.Error("fetchFrom accepted a digest that is none")
	}
}

func TestReportOfAndWanted(t *testing.T) {
	const running, next = "v1@sha256:a", "v2@sha256:b"
	failed := &State{Phase: Failed, Target: &Binary{Release: "v2", Digest: "sha256:b"}, Reason: ReasonExited, Message: "exited"}
	moving := &State{Phase: Starting, Target: &Binary{Release: "v2", Digest: "sha256:b"}}
	say := reportOf(running, false, failed, map[string]string{v1alpha1.ReleaseRunningAnnotation: running})
	if len(say) != 3 || say[v1alpha1.ReleaseFailedAnnotation] != next || say[v1alpha1.ReleaseFailedReasonAnnotation] != ReasonExited {
		t.Errorf("reportOf a failed move = %v; want the failure said, the running release not again", say)
	}
	if say := reportOf(running, false, &State{}, map[string]string{}); len(say) != 1 || say[v1alpha1.ReleaseRunningAnnotation] != running {
		t.Errorf("reportOf on a Node made again = %v; want the running release", say)
	}
	if say := reportOf(running, false, &State{}, map[string]string{v1alpha1.ReleaseRunningAnnotation: running}); len(say) != 0 {
		t.Errorf("reportOf with everything said = %v; want nothing", say)
	}
	if say := reportOf(running, true, moving, map[string]string{v1alpha1.ReleaseRunningAnnotation: running}); len(say) != 1 || say[v1alpha1.ReleaseSettlingAnnotation] != running {
		t.Errorf("reportOf while settling = %v; want the settling release said", say)
	}
	if say := reportOf(running, false, &State{}, map[string]string{v1alpha1.ReleaseRunningAnnotation: running, v1alpha1.ReleaseSettlingAnnotation: running}); len(say) != 1 || say[v1alpha1.ReleaseSettlingAnnotation] != nil {
		t.Errorf("reportOf once settled = %v; want the settling annotation removed", say)
	} else if _, ok := say[v1alpha1.ReleaseSettlingAnnotation]; !ok {
		t.Errorf("reportOf once settled = %v; want the settling annotation removed (a null in the patch)", say)
	}
	for _, tc := range []struct {
		name string
		st   *State
		have map[string]string
		want string
	}{
		{"asked", &State{}, map[string]string{v1alpha1.ReleaseTargetAnnotation: next}, next},
		{"not asked", &State{}, map[string]string{}, ""},
		{"runs it", &State{}, map[string]string{v1alpha1.ReleaseTargetAnnotation: running}, ""},
		{"failed it", failed, map[string]string{v1alpha1.ReleaseTargetAnnotation: next, v1alpha1.ReleaseFailedAnnotation: next}, ""},
		{"moving to it", moving, map[string]string{v1alpha1.ReleaseTargetAnnotation: next}, ""},
		{"no state yet", nil, map[string]string{v1alpha1.ReleaseTargetAnnotation: next}, ""},
	} {
		if got := wanted(running, tc.st, tc.have); got != tc.want {
			t.Errorf("%s: wanted = %q, want %q", tc.name, got, tc.want)
		}
	}
}
