// Package traffic is the robustness run's clients: each makes operations
// on a small set of ConfigMaps through client-go (with steadyplane's
// client options, so through failover) and records each one, its times
// and what came back (history); watchers record every event from a
// resourceVersion on, resuming after a failover.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/steadyplane/steadyplane/internal/robustness/history"
	"github.com/steadyplane/steadyplane/internal/robustness/model"
)

// valueKey is the ConfigMap key that holds an object's value.
const valueKey = "v"

// Selector picks the run's objects out of their namespace, where the
// cluster puts its own (kube-root-ca.crt): every write labels its object
// with it, and lists and watches ask for it.
const Selector = "steadyplane.io/robustness=traffic"

// labels are Selector's, on every object written.
var labels = map[string]string{"steadyplane.io/robustness": "traffic"}

// Client makes operations on Names, one at a time, and records them.
type Client struct {
	ID int
	// ConfigMaps is the namespace's ConfigMaps, through the client under
	// test.
	ConfigMaps typedcorev1.ConfigMapInterface
	Names      []string
	Recorder   *history.Recorder
	Rand       *rand.Rand
	// Timeout bounds each request.
	Timeout time.Duration
	// Pace, if set, spaces the operations: each waits for it before its
	// call is recorded, so that an operation's time is the cluster's
	// alone (client-go's own limiter would count its wait in it).
	Pace *rate.Limiter

	// seen is the last resourceVersion this client saw of each object.
	seen   map[string]int64
	writes int
}

// Run makes operations until ctx ends: quorum gets and lists, creates by
// name, updates with the last resourceVersion seen as precondition,
// deletes with it (or none).
func (c *Client) Run(ctx context.Context) {
	if c.seen == nil {
		c.seen = map[string]int64{}
	}
	for ctx.Err() == nil {
		if c.Pace != nil && c.Pace.Wait(ctx) != nil {
			return
		}
		name := c.Names[c.Rand.Intn(len(c.Names))]
		rv, known := c.seen[name]
		switch r := c.Rand.Intn(100); {
		case r < 30:
			c.get(ctx, name)
		case r < 40:
			c.list(ctx)
		case r < 75 && known:
			c.update(ctx, name, rv)
		case r < 75, r < 88:
			c.create(ctx, name)
		default:
			c.delete(ctx, name, rv)
		}
	}
}

// do runs one request with its timeout and records it: its Input, and
// the Output fill makes of its error.
func (c *Client) do(ctx context.Context, in model.Input, call func(context.Context) (model.Output, error)) model.Output {
	start := c.Recorder.Since()
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	out, err := call(rctx)
	cancel()
	op := history.Op{Client: c.ID, Input: in, Call: start, Return: c.Recorder.Since()}
	if err != nil {
		out = model.Output{Result: ResultOf(err)}
		op.Err = err.Error()
	}
	op.Output = out
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The run ended under it: its outcome is unknown, and it says
		// nothing of the cluster's availability.
		op.Output.Result = model.Unknown
	}
	c.Recorder.Add(op)
	switch {
	case out.Result == model.OK && in.Kind != model.Delete:
		c.seen[in.Name] = out.RV
	case out.Result == model.OK, out.Result == model.NotFound, out.Result == model.Conflict:
		delete(c.seen, in.Name)
	}
	return out
}

func (c *Client) get(ctx context.Context, name string) {
	c.do(ctx, model.Input{Kind: model.Get, Name: name}, func(ctx context.Context) (model.Output, error) {
		cm, err := c.ConfigMaps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return model.Output{}, err
		}
		return read(cm)
	})
}

// list is a quorum list of the namespace, recorded as a get of each name
// at the list's times.
func (c *Client) list(ctx context.Context) {
	start := c.Recorder.Since()
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	list, err := c.ConfigMaps.List(rctx, metav1.ListOptions{LabelSelector: Selector})
	cancel()
	end := c.Recorder.Since()
	if err != nil {
		// A failed read says nothing: recorded for availability only.
		c.Recorder.Add(history.Op{Client: c.ID, Input: model.Input{Kind: model.Get, Name: ""}, Call: start, Return: end,
			Output: model.Output{Result: model.Unknown}, Err: err.Error(), FromList: true})
		return
	}
	found := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		found[list.Items[i].Name] = &list.Items[i]
	}
	for _, name := range c.Names {
		op := history.Op{Client: c.ID, Input: model.Input{Kind: model.Get, Name: name}, Call: start, Return: end, FromList: true}
		cm, ok := found[name]
		if !ok {
			op.Output = model.Output{Result: model.NotFound}
		} else if op.Output, err = read(cm); err != nil {
			op.Output, op.Err = model.Output{Result: model.Unknown}, err.Error()
		}
		c.Recorder.Add(op)
	}
}

func (c *Client) create(ctx context.Context, name string) {
	value := c.nextValue()
	c.do(ctx, model.Input{Kind: model.Create, Name: name, Value: value}, func(ctx context.Context) (model.Output, error) {
		cm, err := c.ConfigMaps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{valueKey: value}}, metav1.CreateOptions{})
		if err != nil {
			return model.Output{}, err
		}
		return written(cm)
	})
}

func (c *Client) update(ctx context.Context, name string, rv int64) {
	value := c.nextValue()
	c.do(ctx, model.Input{Kind: model.Update, Name: name, Value: value, Precondition: rv}, func(ctx context.Context) (model.Output, error) {
		cm, err := c.ConfigMaps.Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: strconv.FormatInt(rv, 10)},
			Data:       map[string]string{valueKey: value},
		}, metav1.UpdateOptions{})
		if err != nil {
			return model.Output{}, err
		}
		return written(cm)
	})
}

// delete deletes name, on the condition that it is still at rv when rv is
// not 0.
func (c *Client) delete(ctx context.Context, name string, rv int64) {
	c.do(ctx, model.Input{Kind: model.Delete, Name: name, Precondition: rv}, func(ctx context.Context) (model.Output, error) {
		opts := metav1.DeleteOptions{}
		if rv != 0 {
			opts.Preconditions = &metav1.Preconditions{ResourceVersion: ptr.To(strconv.FormatInt(rv, 10))}
		}
		return model.Output{Result: model.OK}, c.ConfigMaps.Delete(ctx, name, opts)
	})
}

// nextValue is a value no other write of the run has: the client's id and
// its count of writes.
func (c *Client) nextValue() string {
	c.writes++
	return fmt.Sprintf("c%d-%d", c.ID, c.writes)
}

// ResultOf is the model's result for a request's error: NotFound,
// AlreadyExists and Conflict say what the server decided; every other
// error leaves the outcome unknown.
func ResultOf(err error) model.Result {
	switch {
	case err == nil:
		return model.OK
	case apierrors.IsNotFound(err):
		return model.NotFound
	case apierrors.IsAlreadyExists(err):
		return model.AlreadyExists
	case apierrors.IsConflict(err):
		return model.Conflict
	}
	return model.Unknown
}

func read(cm *corev1.ConfigMap) (model.Output, error) {
	rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	if err != nil {
		return model.Output{}, fmt.Errorf("resourceVersion %q of %s: %w", cm.ResourceVersion, cm.Name, err)
	}
	return model.Output{Result: model.OK, Value: cm.Data[valueKey], RV: rv}, nil
}

func written(cm *corev1.ConfigMap) (model.Output, error) {
	out, err := read(cm)
	out.Value = ""
	return out, err
}
