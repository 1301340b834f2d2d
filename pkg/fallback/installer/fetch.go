package installer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/steadyplane/steadyplane/pkg/fallback/apis/v1alpha1"
	"github.com/steadyplane/steadyplane/pkg/fallback/operator"
)

// Fetch reads revision n for node from the API: its ConfigMap, its rendering
// for node (the manifests) and the copies of the user's ConfigMaps and
// Secrets it names. It retries a failing API (the
// installer may start while the server restarts) until ctx ends, and fails
// at once on what retrying cannot fix.
func Fetch(ctx context.Context, client kubernetes.Interface, n int32, node string, withMonitor bool) (Revision, error) {
	r := Revision{Number: int(n), ConfigMaps: map[string]map[string][]byte{}, Secrets: map[string]map[string][]byte{}}
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		last = fetch(ctx, client, n, node, withMonitor, &r)
		if apierrors.IsForbidden(last) || apierrors.IsInvalid(last) || isPermanent(last) {
			return false, last
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		return r, last
	}
	return r, err
}

type permanentError struct{ error }

func isPermanent(err error) bool {
	_, ok := err.(permanentError)
	return ok
}

func fetch(ctx context.Context, client kubernetes.Interface, n int32, node string, withMonitor bool, r *Revision) error {
	cms := client.CoreV1().ConfigMaps(v1alpha1.Namespace)
	cm, err := cms.Get(ctx, operator.RevisionName(operator.Operand, n), metav1.GetOptions{})
	if err != nil {
		return err
	}
	rendering, err := cms.Get(ctx, operator.RenderingName(operator.Operand, n, node), metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.Operand = []byte(rendering.Data[operator.RevisionOperandKey])
	if len(r.Operand) == 0 {
		return permanentError{fmt.Errorf("ConfigMap %s/%s has no %s", rendering.Namespace, rendering.Name, operator.RevisionOperandKey)}
	}
	r.Monitor = nil
	if withMonitor {
		r.Monitor = []byte(rendering.Data[operator.RevisionMonitorKey])
	}
	var cmNames, secretNames []string
	for annotation, dst := range map[string]*[]string{operator.ConfigMapsAnnotation: &cmNames, operator.SecretsAnnotation: &secretNames} {
		if v := cm.Annotations[annotation]; v != "" {
			if err := json.Unmarshal([]byte(v), dst); err != nil {
				return permanentError{fmt.Errorf("ConfigMap %s/%s annotation %s: %w", cm.Namespace, cm.Name, annotation, err)}
			}
		}
	}
	for _, name := range cmNames {
		c, err := cms.Get(ctx, operator.CopyName(name, n), metav1.GetOptions{})
		if err != nil {
			return err
		}
		files := map[string][]byte{}
		for k, v := range c.Data {
			files[k] = []byte(v)
		}
		for k, v := range c.BinaryData {
			files[k] = v
		}
		r.ConfigMaps[name] = files
	}
	for _, name := range secretNames {
		s, err := client.CoreV1().Secrets(v1alpha1.Namespace).Get(ctx, operator.CopyName(name, n), metav1.GetOptions{})
		if err != nil {
			return err
		}
		r.Secrets[name] = s.Data
	}
	return nil
}
