// Package localstatus is the node agent's own record of its pods, kept on the
// node's disk and served read-only on the loopback address: start attempts,
// restarts, the last end of each container with its termination message. It
// is the truth while no API server answers. A restarted agent continues the
// counts from it, and the startup monitor of a control-plane revision reads
// it exactly when the API server it watches is down.
package localstatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/steadyplane/steadyplane/pkg/atomicfile"
)

// FileName is the record's name inside a pod's directory.
const FileName = "status.json"

// maxRecordSize bounds what Read accepts: a record is a pod status, a few
// kilobytes; anything larger is not one.
const maxRecordSize = 1 << 20

// Pod is what the agent last knew of one pod.
type Pod struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Static is set for a pod from the manifest directory.
	Static bool `json:"static,omitempty"`
	// Annotations are the pod's, e.g. a control-plane revision.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Status is the status the agent computed, as the API would show it;
	// each container's RestartCount and LastTerminationState (exit code,
	// reason, times, termination message) are here.
	Status corev1.PodStatus `json:"status"`
	// StartAttempts counts, per container name, every attempt to start
	// it, including the ones that failed before the process ran: the
	// first one says a revision was tried at all, a second one that it
	// crashed or could not start.
	StartAttempts map[string]int32 `json:"startAttempts,omitempty"`
	// LivenessKills counts, per container name, the runs the agent
	// stopped because the liveness probe failed: a restart the agent
	// caused, which a crash loop is not.
	LivenessKills map[string]int32 `json:"livenessKills,omitempty"`
	// Allocated are, per regular container, the resources the agent
	// allocated to it (the kubelet's allocation checkpoint): an in-place
	// resize still waiting for room is not taken as allocated by the next
	// agent.
	Allocated map[string]corev1.ResourceRequirements `json:"allocated,omitempty"`
}

// Read returns the record kept in podDir, or nil when there is none. A record
// that cannot be parsed (a disk that lost it) is an error naming the file; the
// caller starts from nothing rather than from garbage.
func Read(podDir string) (*Pod, error) {
	path := filepath.Join(podDir, FileName)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a pod record", path, maxRecordSize)
	}
	var p Pod
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s is not a pod record: %w", path, err)
	}
	return &p, nil
}

// Store holds the latest record of every pod the agent runs, writes each to
// its pod directory when it changes (atomically, 0600) and serves them.
type Store struct {
	mu   sync.Mutex
	pods map[types.UID]entry
}

type entry struct {
	dir  string
	pod  *Pod
	data []byte
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{pods: map[types.UID]entry{}} }

// Put records p, kept in podDir; the file is written only when the record
// changed, so a pod that is steady costs no disk writes.
func (s *Store) Put(podDir string, p *Pod) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old, ok := s.pods[p.UID]
	s.mu.Unlock()
	if ok && bytes.Equal(old.data, data) {
		return nil
	}
	if err := os.MkdirAll(podDir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(podDir, FileName), data, 0o600); err != nil {
		return err
	}
	s.mu.Lock()
	s.pods[p.UID] = entry{dir: podDir, pod: p, data: data}
	s.mu.Unlock()
	return nil
}

// Forget drops the pod's record from what is served (its directory, record
// included, is removed by the pod's teardown).
func (s *Store) Forget(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
	s.mu.Unlock()
}

// List returns the records, ordered by namespace and name.
func (s *Store) List() []Pod {
	s.mu.Lock()
	out := make([]Pod, 0, len(s.pods))
	for _, e := range s.pods {
		out = append(out, *e.pod)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+string(a.UID), b.Namespace+"/"+b.Name+"/"+string(b.UID))
	})
	return out
}

// PodList is the records as the kubelet's read-only /pods shows pods: a
// v1 PodList of metadata and status, which kubectl and client-go decode.
func PodList(records []Pod) *corev1.PodList {
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	for _, r := range records {
		list.Items = append(list.Items, corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Annotations: r.Annotations},
			Status:     r.Status,
		})
	}
	return list
}

// Register adds the read-only endpoints to mux, which answers without
// authentication on a loopback address: /pods (a v1 PodList, as the
// kubelet's read-only port) and /localstatus/pods (the records, with start
// attempts), of the static pods alone. Those are steadyplane's own (what
// the startup monitor and a release's settling read); the others' names,
// addresses and annotations (kubectl's last-applied configuration holds a
// whole manifest) are for authenticated callers of the node API. Only GET
// and HEAD are answered.
func (s *Store) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, PodList(s.static())) })
	mux.HandleFunc("GET /localstatus/pods", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, s.static()) })
}

// static are the records of the static pods.
func (s *Store) static() []Pod {
	return slices.DeleteFunc(s.List(), func(p Pod) bool { return !p.Static })
}

// WriteJSON answers with v as indented JSON: the read-only /pods endpoints
// of the node (here and on the node API) answer alike.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
