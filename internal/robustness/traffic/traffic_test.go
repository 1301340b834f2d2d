package traffic

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

func TestResultOf(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want model.Result
	}{
		{"success", nil, model.OK},
		{"not found", apierrors.NewNotFound(cm, "a"), model.NotFound},
		{"exists", apierrors.NewAlreadyExists(cm, "a"), model.AlreadyExists},
		{"conflict", apierrors.NewConflict(cm, "a", errors.New("modified")), model.Conflict},
		// Each of these may come after the server applied the write.
		{"timeout from etcd", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), model.Unknown},
		{"server timeout", apierrors.NewServerTimeout(cm, "create", 1), model.Unknown},
		{"too many requests", apierrors.NewTooManyRequests("later", 1), model.Unknown},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), model.Unknown},
		{"deadline", context.DeadlineExceeded, model.Unknown},
		{"connection lost", errors.New("http2: client connection lost"), model.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ResultOf(tc.err); got != tc.want {
				t.Errorf("ResultOf(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}
