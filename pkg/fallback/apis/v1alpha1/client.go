package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Client reads and writes KubeAPIServer objects through a dynamic client
// (the API is small; generated clientsets would be most of the code).
type Client struct {
	Dynamic dynamic.Interface
}

// Get returns the object name.
func (c Client) Get(ctx context.Context, name string) (*KubeAPIServer, error) {
	u, err := c.Dynamic.Resource(GroupVersionResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// Create creates obj unless an object of its name exists.
func (c Client) Create(ctx context.Context, obj *KubeAPIServer) error {
	u, err := ToUnstructured(obj)
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(GroupVersionResource).Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// UpdateStatus writes obj's status (a conflict if obj is not the newest).
func (c Client) UpdateStatus(ctx context.Context, obj *KubeAPIServer) (*KubeAPIServer, error) {
	u, err := ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	out, err := c.Dynamic.Resource(GroupVersionResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// SetRelease sets spec.release of object name (a merge patch: the rest
// of the spec stays as its owner wrote it).
func (c Client) SetRelease(ctx context.Context, name string, r Release) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"release": r}})
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(GroupVersionResource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// FromUnstructured converts a dynamic client's object.
func FromUnstructured(u *unstructured.Unstructured) (*KubeAPIServer, error) {
	var obj KubeAPIServer
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", Kind, u.GetName(), err)
	}
	return &obj, nil
}

// ToUnstructured converts obj for a dynamic client, with its apiVersion and kind.
func ToUnstructured(obj *KubeAPIServer) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	return u, nil
}
