// Package metricsserver serves a component's Prometheus metrics (and what
// else its handler holds) over plain HTTP on a loopback address until the
// component stops.
package metricsserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves h on addr until ctx ends, then returns nil; it returns at once
// with the error when addr cannot be listened on.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	stopped := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stopped()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Start serves g's metrics on addr in the background until ctx ends, and
// sends errs why it could not (a port another program holds); an empty
// addr serves nothing.
func Start(ctx context.Context, addr string, g prometheus.Gatherer, errs chan<- error) {
	if addr == "" {
		return
	}
	go func() {
		if err := Serve(ctx, addr, promhttp.HandlerFor(g, promhttp.HandlerOpts{})); err != nil {
			errs <- err
		}
	}()
}
