package metricsserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestServeUntilTheContextEnds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "metrics") }))
	}()
	var body string
	for i := 0; i < 50 && body == ""; i++ {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if body != "metrics" {
		t.Fatalf("served %q, want the handler's answer", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after its context ended: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still running 5s after its context ended")
	}
}

func TestServeReportsAnAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errc := make(chan error, 1)
	go func() { errc <- Serve(context.Background(), l.Addr().String(), http.NotFoundHandler()) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Serve on a taken address returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve on a taken address did not return")
	}
}
