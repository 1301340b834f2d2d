package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/util/format"
)

// errSleepCut is a sleep hook's error when its container stops first.
var errSleepCut = errors.New("container terminated before sleep hook finished")

// RunHook runs lifecycle handler h (a postStart or preStop hook) of container
// c of pod, whose address is host, as the kubelet's handler runner does: an
// exec command through commandFor, an HTTP GET (any answer counts; only a
// request that gets none fails), or a sleep. The end of ctx ends it. It returns
// the kubelet's message for a failure, with its error.
func RunHook(ctx context.Context, h *corev1.LifecycleHandler, pod *corev1.Pod, host string, c *corev1.Container, commandFor CommandFunc) (string, error) {
	switch {
	case h.Exec != nil:
		out, err := execIn(ctx, h.Exec.Command, commandFor)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, c.Name, format.Pod(pod), err, string(out)), err
		}
		return "", nil
	case h.HTTPGet != nil:
		err := hookGet(ctx, h.HTTPGet, host, c)
		if err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, format.Pod(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		t := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
			return "", nil
		case <-ctx.Done():
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, format.Pod(pod), errSleepCut), errSleepCut
		}
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

// hookGet sends an HTTP hook's request; its answer is read (10 KiB at most)
// and dropped.
func hookGet(ctx context.Context, get *corev1.HTTPGetAction, host string, c *corev1.Container) error {
	req, err := httpRequest(get, c, host, "lifecycle")
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxExecOutput))
	return nil
}
