package altsvcclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// MayResumeWatch reports whether the answer to req can be resumed on
// another host when its stream breaks: a JSON watch (what kubectl and
// unstructured clients use) that does not ask for initial events, which a
// resumed watch would send again. Other watches (protobuf informers) are
// only counted against their host; their clients watch again by themselves.
func MayResumeWatch(req *http.Request, resp *http.Response) bool {
	if req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
		return false
	}
	q := req.URL.Query()
	if w := q.Get("watch"); w != "true" && w != "1" || q.Get("sendInitialEvents") == "true" {
		return false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// maxWatchEvent bounds one event of a resumed watch: the API server's own
// limit on an object is 3 MiB, twice that leaves room for the envelope.
const maxWatchEvent = 6 << 20

// resumingWatch is the body of a watch that survives the loss of its
// server. It hands the reader whole events only, remembers the
// resourceVersion of the last one, and when the stream breaks on a network
// failure opens the same watch on the next host from there: no event is
// lost, none comes twice, and the reader sees one stream.
type resumingWatch struct {
	ctx    context.Context
	req    *http.Request // the caller's request
	reopen func(*http.Request) (*http.Response, error)
	broke  func(error) // counts a broken stream against its host

	// mu guards body and closed: the caller's Close (a watcher's Stop)
	// may come while the reading goroutine resumes.
	mu     sync.Mutex
	body   io.ReadCloser
	closed bool

	br      *bufio.Reader
	pending []byte
	lastRV  string
	// lastError tells that the last event was an ERROR: a server that
	// ends a watch with one (a resourceVersion too old or too new) would
	// send it again to a resumed watch.
	lastError bool
	// resumedAt and eventsSince bound resuming after a clean end: a server
	// that ends a resumed watch at once without an event ends it for good.
	resumedAt   time.Time
	eventsSince int
}

func newResumingWatch(req *http.Request, resp *http.Response, reopen func(*http.Request) (*http.Response, error), broke func(error)) *resumingWatch {
	return &resumingWatch{ctx: req.Context(), req: req, reopen: reopen, broke: broke, body: resp.Body, br: bufio.NewReaderSize(resp.Body, 32<<10)}
}

// Read implements io.Reader.
func (w *resumingWatch) Read(p []byte) (int, error) {
	for len(w.pending) == 0 {
		line, err := w.readEvent()
		if err == nil {
			w.noteResourceVersion(line)
			w.pending = line
			w.eventsSince++
			break
		}
		if w.ctx.Err() != nil || w.isClosed() {
			return 0, err
		}
		if err == io.EOF {
			if !w.resumeAtEnd() {
				return 0, err
			}
		} else if Classify(err, Connected) != NetworkFailure {
			return 0, err
		} else {
			w.broke(err)
		}
		if rerr := w.resume(); rerr != nil {
			klog.InfoS("Could not resume a watch on another API server", "path", w.req.URL.Path, "err", rerr)
			return 0, err
		}
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	return n, nil
}

// resumeAtEnd says whether a watch its server ended cleanly goes on: an
// API server that shuts down (a rollout, a restart) ends its watches so,
// and kubectl get -w would end with them. A watch that asked for an end
// (timeoutSeconds) ends; so does one whose last event was an ERROR (the
// server's answer, which it would give again), one with no exact position
// to go on from (no event with a resourceVersion, and none asked for), and
// one that a server ends again within a second of resuming it, without an
// event in between.
func (w *resumingWatch) resumeAtEnd() bool {
	q := w.req.URL.Query()
	if w.lastError || q.Get("timeoutSeconds") != "" {
		return false
	}
	// Only from an exact position: a watch from "" or "0" opened again
	// would start from now, or replay every object as ADDED.
	if rv := q.Get("resourceVersion"); w.lastRV == "" && (rv == "" || rv == "0") {
		return false
	}
	return w.eventsSince > 0 || w.resumedAt.IsZero() || time.Since(w.resumedAt) > time.Second
}

func (w *resumingWatch) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// readEvent reads one newline-terminated event; a partial event at a break
// is dropped, since the resumed watch sends it again whole.
func (w *resumingWatch) readEvent() ([]byte, error) {
	var line []byte
	for {
		chunk, err := w.br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == nil {
			return line, nil
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) > maxWatchEvent {
			return nil, fmt.Errorf("watch event over %d bytes", maxWatchEvent)
		}
	}
}

func (w *resumingWatch) noteResourceVersion(event []byte) {
	var e struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if json.Unmarshal(event, &e) != nil {
		return
	}
	w.lastError = e.Type == "ERROR"
	if e.Object.Metadata.ResourceVersion != "" {
		w.lastRV = e.Object.Metadata.ResourceVersion
	}
}

// resume opens the watch again from the last event seen.
func (w *resumingWatch) resume() error {
	req := w.req.Clone(w.ctx)
	if w.lastRV != "" {
		q := req.URL.Query()
		q.Set("resourceVersion", w.lastRV)
		req.URL.RawQuery = q.Encode()
	}
	resp, err := w.reopen(req)
	if err != nil {
		return err
	}
	if !MayResumeWatch(req, resp) {
		resp.Body.Close()
		return fmt.Errorf("the watch was answered %s", resp.Status)
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		resp.Body.Close()
		return errors.New("the watch was closed")
	}
	w.body.Close()
	w.body = resp.Body
	w.mu.Unlock()
	w.br = bufio.NewReaderSize(resp.Body, 32<<10)
	w.resumedAt, w.eventsSince = time.Now(), 0
	klog.InfoS("Resumed a watch on another API server", "path", req.URL.Path, "resourceVersion", w.lastRV)
	metrics.resumes.Inc()
	return nil
}

// Close implements io.Closer; a watch closed while it resumes stays closed.
func (w *resumingWatch) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.body.Close()
}
