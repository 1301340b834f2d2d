package altsvcclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// keepRefusal returns resp with its (small) body read into memory, so the
// connection is free and the answer can still be returned later.
func keepRefusal(resp *http.Response) *http.Response {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// maxBuffered bounds how much of a response bufferBody reads ahead.
const maxBuffered = 8 << 20

// bufferBody reads the body of a response to a request that may be sent
// again (idempotent, not a watch or a followed log) before handing it over,
// so that a server dying in the middle of its answer is a failure of this
// attempt, and the request moves to another host, instead of an error the
// caller gets while reading. Up to maxBuffered bytes are read ahead; the rest,
// if any, streams as before.
// It reports whether the whole body is now in memory.
func bufferBody(req *http.Request, resp *http.Response, stream bool) (bool, error) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return true, nil
	}
	if stream || !MayResend(req.Method, true, bodyReplayable(req)) {
		return false, nil
	}
	if n := resp.ContentLength; n >= 0 && n < maxBuffered {
		// The length is known: read it into one slice of that size.
		buf := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			resp.Body.Close()
			return false, fmt.Errorf("reading the response body from %s: %w", req.URL.Host, err)
		}
		resp.Body.Close()
		body := &bufferedBody{}
		body.Reset(buf)
		resp.Body = body
		return true, nil
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, maxBuffered))
	if err != nil {
		resp.Body.Close()
		return false, fmt.Errorf("reading the response body from %s: %w", req.URL.Host, err)
	}
	if n < maxBuffered {
		resp.Body.Close()
		resp.Body = io.NopCloser(&buf)
		return true, nil
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(&buf, resp.Body), resp.Body}
	return false, nil
}

// watchBody makes a read error on a body that is still streaming from the
// network (a watch, a followed log, the rest of a large answer) call
// onError, unless the caller ended the request.
func watchBody(req *http.Request, resp *http.Response, onError func(error)) {
	resp.Body = &reportingBody{ReadCloser: resp.Body, ctx: req.Context(), onError: onError}
}

// reportingBody reports the first read error that is not the end of the
// body nor the caller's doing: a cancelled request, or a body the caller
// closed (a watch stopped while a goroutine still reads it).
type reportingBody struct {
	io.ReadCloser
	ctx      context.Context
	onError  func(error)
	reported atomic.Bool
	closed   atomic.Bool
}

func (b *reportingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() == nil && !b.closed.Load() && b.reported.CompareAndSwap(false, true) {
		b.onError(err)
	}
	return n, err
}

// Close marks the end as the caller's before the read it interrupts fails.
func (b *reportingBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// isStreaming reports requests whose answer is open-ended: watches and
// followed logs.
func isStreaming(req *http.Request) bool {
	if strings.Contains(req.URL.Path, "/watch/") {
		return true
	}
	raw := req.URL.RawQuery
	if raw == "" {
		return false
	}
	if strings.ContainsAny(raw, "%+;") {
		// Escaped or malformed: let url.ParseQuery decide, as before.
		q := req.URL.Query()
		return q.Get("watch") == "true" || q.Get("watch") == "1" || q.Get("follow") == "true"
	}
	watch, follow := firstQueryValue(raw, "watch"), firstQueryValue(raw, "follow")
	return watch == "true" || watch == "1" || follow == "true"
}

// firstQueryValue is url.Values.Get of a raw query that has nothing
// escaped, without building the map.
func firstQueryValue(raw, key string) string {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if k, v, _ := strings.Cut(pair, "="); k == key {
			return v
		}
	}
	return ""
}

// bufferedBody is a response body read into memory.
type bufferedBody struct{ bytes.Reader }

// Close implements io.Closer; there is nothing to release.
func (*bufferedBody) Close() error { return nil }
