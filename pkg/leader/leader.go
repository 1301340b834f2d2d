// Package leader runs work on one process of several, by a Lease: the
// KubeAPIServer operators and the readiness controllers of a cluster's
// servers, one acting at a time, a successor taking over within the
// lease when its server dies.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Run runs run while lock's lease is this process's: one process per
// server, one acting, and a server that dies hands over within the
// lease. It returns when ctx ends (the work stops first, then the lease is
// handed back, so that no successor acts while a write of this one lands),
// when run fails, or on an error from errs. A lease lost (its API server
// down longer than the renew deadline, as in a rollout on one server) stops
// the work and waits to lead again in the same process: exiting would add
// the node agent's crash-loop backoff to every such outage.
func Run(ctx context.Context, lock resourcelock.Interface, log *slog.Logger, run func(context.Context) error, errs <-chan error) error {
	for {
		err := leadOnce(ctx, lock, log, run, errs)
		if !errors.Is(err, errLostLease) || ctx.Err() != nil {
			return err
		}
		log.Info("lost the lease; the work stopped, waiting to lead again", "lease", lock.Describe())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// errLostLease is leadOnce's error when the lease was lost.
var errLostLease = errors.New("lost the lease")

// leadOnce waits for the lease, runs run while it holds it, and returns as
// Run does, or with errLostLease.
func leadOnce(ctx context.Context, lock resourcelock.Interface, log *slog.Logger, run func(context.Context) error, errs <-chan error) error {
	lease := lock.Describe()
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	electCtx, stopElect := context.WithCancel(context.Background())
	defer stopElect()
	started, ran, lost := make(chan struct{}), make(chan error, 1), make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: true, Name: lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				log.Info("leading", "lease", lease, "identity", lock.Identity())
				close(started)
				ran <- run(runCtx)
			},
			// client-go calls it also when the elector stops; only a loss
			// while running is one.
			OnStoppedLeading: func() {
				if electCtx.Err() == nil {
					close(lost)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	log.Info("waiting to lead", "lease", lease, "identity", lock.Identity())
	electorDone := make(chan struct{})
	go func() {
		elector.Run(electCtx)
		close(electorDone)
	}()
	var result error
	runEnded := false
	select {
	case <-ctx.Done():
	case err := <-errs:
		result = err
	case <-lost:
		result = fmt.Errorf("%s: %w", lease, errLostLease)
	case err := <-ran:
		runEnded, result = true, err
		if result == nil {
			result = errors.New("the work stopped")
		}
	}
	stopRun()
	select {
	case <-started:
		if !runEnded {
			select {
			case <-ran:
			case <-time.After(30 * time.Second):
				log.Info("the work did not stop within 30s; handing the lease back anyway", "lease", lease)
			}
		}
	default:
	}
	stopElect()
	select {
	case <-electorDone:
	case <-time.After(10 * time.Second):
	}
	return result
}

// Lease is the lock of the Lease namespace/name, held as identity.
func Lease(client kubernetes.Interface, namespace, name, identity string) (resourcelock.Interface, error) {
	return resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: identity})
}
