package altsvcclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
)

// blockingBody blocks a read until it is closed or fails, as an HTTP/2
// response body does.
type blockingBody struct {
	closed chan struct{}
	fail   chan error
}

func (b *blockingBody) Read([]byte) (int, error) {
	select {
	case <-b.closed:
		return 0, errors.New("http2: response body closed")
	case err := <-b.fail:
		return 0, err
	}
}

func (b *blockingBody) Close() error { close(b.closed); return nil }

// TestWatchBodyReports checks which ends of a streaming body count against
// its API server: a broken stream does; the caller stopping a watch (closing
// the body while another goroutine reads it) or cancelling does not.
func TestWatchBodyReports(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(body io.Closer, b *blockingBody, cancel context.CancelFunc)
		want bool
	}{
		{"the stream breaks", func(_ io.Closer, b *blockingBody, _ context.CancelFunc) { b.fail <- io.ErrUnexpectedEOF }, true},
		{"the caller closes the body", func(body io.Closer, _ *blockingBody, _ context.CancelFunc) { body.Close() }, false},
		{"the caller cancels", func(_ io.Closer, b *blockingBody, cancel context.CancelFunc) {
			cancel()
			b.fail <- context.Canceled
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://a/api/v1/pods?watch=true", nil)
			b := &blockingBody{closed: make(chan struct{}), fail: make(chan error, 1)}
			resp := &http.Response{Body: b}
			reported := make(chan error, 1)
			watchBody(req, resp, func(err error) { reported <- err })
			read := make(chan struct{})
			go func() {
				_, _ = resp.Body.Read(make([]byte, 1))
				close(read)
			}()
			tt.end(resp.Body, b, cancel)
			<-read
			select {
			case err := <-reported:
				if !tt.want {
					t.Errorf("reported %v, want nothing", err)
				}
			default:
				if tt.want {
					t.Error("nothing reported, want the broken stream")
				}
			}
		})
	}
}
