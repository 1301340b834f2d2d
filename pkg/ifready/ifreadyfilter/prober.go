package ifreadyfilter

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// DefaultProbeInterval is how often the server asks its own /readyz while it
// initializes.
const DefaultProbeInterval = 250 * time.Millisecond

// ProbeUntilInitialized asks the server's own full /readyz through client every
// interval until it answers 200 or ctx ends, and then sets latch. It lets the
// latch flip even when nobody else polls /readyz. The request goes through the
// server's handler chain, so the filter sees the 200 as well; setting the latch
// twice is harmless.
func ProbeUntilInitialized(ctx context.Context, client rest.Interface, latch *Latch, interval time.Duration) {
	_ = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		if latch.IsSet() {
			return true, nil
		}
		var code int
		err := client.Get().AbsPath("/readyz").Do(ctx).StatusCode(&code).Error()
		if code == http.StatusOK {
			latch.Set()
			return true, nil
		}
		klog.V(4).InfoS("Server not yet initialized", "readyzStatus", code, "err", err)
		return false, nil
	})
}
