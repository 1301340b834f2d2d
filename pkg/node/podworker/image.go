package podworker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/kubernetes/pkg/credentialprovider"
	credentialsecrets "k8s.io/kubernetes/pkg/credentialprovider/secrets"

	"github.com/steadyplane/steadyplane/pkg/node/images"
	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// usesHostRoot tells whether pod's containers run from the host's system
// directories rather than their images.
func usesHostRoot(pod *corev1.Pod) bool {
	return pod.Spec.RuntimeClassName != nil && *pod.Spec.RuntimeClassName == runtime.HostRuntimeClass
}

// Reasons of a container waiting for its image, as the kubelet gives them.
const (
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	ReasonInvalidImageName  = "InvalidImageName"
)

// imageError is why a container's image is not there: its Reason is the
// container's waiting reason.
type imageError struct {
	reason string
	err    error
}

func (e *imageError) Error() string { return e.err.Error() }
func (e *imageError) Unwrap() error { return e.err }

// imageReason returns the waiting reason of an image error, or "".
func imageReason(err error) string {
	var ie *imageError
	if errors.As(err, &ie) {
		return ie.reason
	}
	return ""
}

// pullNeeded decides, as the kubelet's image manager, whether a container
// with policy needs its image pulled, given whether the node has it.
func pullNeeded(policy corev1.PullPolicy, present bool) (bool, error) {
	switch policy {
	case corev1.PullAlways:
		return true, nil
	case corev1.PullNever:
		if !present {
			return false, errNeverPull
		}
		return false, nil
	default: // IfNotPresent; the API server defaults the policy
		return !present, nil
	}
}

var errNeverPull = errors.New("not present with pull policy of Never")

// Image pull backoff, as the kubelet's: 10s doubling up to 5 minutes, per
// pod and image.
const (
	imageBackoffBase = 10 * time.Second
	imageBackoffMax  = 300 * time.Second
)

// ImageService gets containers their images: from the store, or pulled.
// Pulls are serialized, as the kubelet's are by default.
type ImageService struct {
	store   *images.Store
	puller  *images.Puller
	backoff *flowcontrol.Backoff
	pullMu  sync.Mutex
}

func NewImageService(puller *images.Puller) *ImageService {
	return &ImageService{store: puller.Store, puller: puller, backoff: flowcontrol.NewBackOff(imageBackoffBase, imageBackoffMax)}
}

// pulledImage is a container's image as the store has it.
type pulledImage struct {
	images.Image
	// name is the container's image reference, normalized, as its status
	// shows it.
	name   string
	config *v1.ConfigFile
	// layers are the image's layer directories, top first.
	layers []string
}

// ref is how the container status names the image's content: a repository
// digest when the image came from a registry, else its ID.
func (p *pulledImage) ref() string {
	if len(p.RepoDigests) > 0 {
		return p.RepoDigests[0]
	}
	return p.ID
}

// ensure returns c's image, pulling it when its policy says so; secrets
// returns the pod's image pull secrets, event records what happens as the
// kubelet's image manager does.
func (s *ImageService) ensure(ctx context.Context, pod *corev1.Pod, c *corev1.Container, secrets func() []corev1.Secret,
	event func(eventType, reason, format string, args ...any)) (*pulledImage, error) {
	_, name, err := images.Normalize(c.Image)
	if err != nil {
		msg := fmt.Errorf("Failed to apply default image tag %q: couldn't parse image name %q: %v", c.Image, c.Image, err)
		event(corev1.EventTypeWarning, ReasonInvalidImageName, "%v", msg)
		return nil, &imageError{ReasonInvalidImageName, msg}
	}
	img, present, err := s.store.Get(name)
	if err != nil {
		return nil, &imageError{ReasonErrImagePull, err}
	}
	pull, err := pullNeeded(c.ImagePullPolicy, present)
	if err != nil {
		msg := fmt.Errorf("Container image %q is %v", c.Image, err)
		event(corev1.EventTypeWarning, ReasonErrImageNeverPull, "%v", msg)
		return nil, &imageError{ReasonErrImageNeverPull, msg}
	}
	if pull {
		key := string(pod.UID) + "/" + name
		if s.backoff.IsInBackOffSinceUpdate(key, s.backoff.Clock.Now()) {
			msg := fmt.Errorf("Back-off pulling image %q", c.Image)
			event(corev1.EventTypeNormal, "BackOff", "%v", msg)
			return nil, &imageError{ReasonImagePullBackOff, msg}
		}
		event(corev1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
		start := time.Now()
		s.pullMu.Lock()
		img, err = s.puller.Pull(ctx, name, credentials(name, secrets()))
		s.pullMu.Unlock()
		if err != nil {
			s.backoff.Next(key, s.backoff.Clock.Now())
			msg := fmt.Errorf("Failed to pull image %q: %v", c.Image, err)
			event(corev1.EventTypeWarning, "Failed", "%v", msg)
			return nil, &imageError{ReasonErrImagePull, msg}
		}
		event(corev1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s. Image size: %d bytes.", c.Image, time.Since(start).Round(time.Millisecond), img.Size)
	} else {
		event(corev1.EventTypeNormal, "Pulled", "Container image %q already present on machine", c.Image)
	}
	return s.load(img, name)
}

// present returns c's image if the store has it, without pulling: for a
// run a previous agent left.
func (s *ImageService) present(c *corev1.Container) (*pulledImage, bool) {
	_, name, err := images.Normalize(c.Image)
	if err != nil {
		return nil, false
	}
	img, ok, err := s.store.Get(name)
	if err != nil || !ok {
		return nil, false
	}
	p, err := s.load(img, name)
	return p, err == nil
}

func (s *ImageService) load(img images.Image, name string) (*pulledImage, error) {
	cf, err := s.store.Config(img.ID)
	if err != nil {
		return nil, &imageError{ReasonErrImagePull, err}
	}
	layers, err := s.store.LayerDirs(img)
	if err != nil {
		return nil, &imageError{ReasonErrImagePull, err}
	}
	return &pulledImage{Image: img, name: name, config: cf, layers: layers}, nil
}

// credentials are the logins the pod's image pull secrets hold for the
// repository of image, in the kubelet's order.
func credentials(image string, secrets []corev1.Secret) []authn.AuthConfig {
	keyring, err := credentialsecrets.MakeDockerKeyring(secrets, &credentialprovider.BasicDockerKeyring{})
	if err != nil {
		return nil
	}
	repo := image
	if i := strings.LastIndexAny(image, "@:"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	found, _ := keyring.Lookup(repo)
	out := make([]authn.AuthConfig, 0, len(found))
	for _, a := range found {
		out = append(out, authn.AuthConfig{Username: a.Username, Password: a.Password, Auth: a.Auth,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken})
	}
	return out
}

// imageArgv is the command a container runs, as Kubernetes combines the
// container's command and args with its image's Entrypoint and Cmd: the
// container's command replaces the Entrypoint and drops the Cmd; its args
// replace the Cmd. The container's own command and args have $(VAR)
// expanded by expand; the image's are taken as they are.
func imageArgv(c *corev1.Container, cfg v1.Config, expand func(string) string) []string {
	cmd, args := expandAll(c.Command, expand), expandAll(c.Args, expand)
	if len(cmd) == 0 {
		cmd = cfg.Entrypoint
		if len(args) == 0 {
			args = cfg.Cmd
		}
	}
	return append(append([]string{}, cmd...), args...)
}

func expandAll(in []string, expand func(string) string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s)
	}
	return out
}

// imageUser resolves an image's User ("uid", "uid:gid", "name",
// "name:group"; "" for root) with the image's /etc/passwd and /etc/group,
// read by readFile. numeric tells whether the user was given as a number,
// which runAsNonRoot needs to verify a non-root user as the kubelet does.
func imageUser(user string, readFile func(string) ([]byte, error)) (u runtime.User, numeric bool, err error) {
	if user == "" {
		return runtime.User{}, true, nil
	}
	name, group, hasGroup := strings.Cut(user, ":")
	uid, uerr := strconv.ParseUint(name, 10, 32)
	numeric = uerr == nil
	if numeric {
		u.UID = uint32(uid)
		if entry, ok := lookupField(readFile, "/etc/passwd", name, 2); ok {
			if gid, err := strconv.ParseUint(entry[3], 10, 32); err == nil {
				u.GID = uint32(gid)
			}
		}
	} else {
		entry, ok := lookupField(readFile, "/etc/passwd", name, 0)
		if !ok {
			return u, false, fmt.Errorf("the image's user %q is not in its /etc/passwd", name)
		}
		id, err1 := strconv.ParseUint(entry[2], 10, 32)
		gid, err2 := strconv.ParseUint(entry[3], 10, 32)
		if err1 != nil || err2 != nil {
			return u, false, fmt.Errorf("the image's /etc/passwd entry for %q is malformed", name)
		}
		u.UID, u.GID = uint32(id), uint32(gid)
	}
	if hasGroup {
		if gid, err := strconv.ParseUint(group, 10, 32); err == nil {
			u.GID = uint32(gid)
		} else if entry, ok := lookupField(readFile, "/etc/group", group, 0); ok {
			gid, err := strconv.ParseUint(entry[2], 10, 32)
			if err != nil {
				return u, numeric, fmt.Errorf("the image's /etc/group entry for %q is malformed", group)
			}
			u.GID = uint32(gid)
		} else {
			return u, numeric, fmt.Errorf("the image's group %q is not in its /etc/group", group)
		}
	}
	return u, numeric, nil
}

// lookupField finds the line of a passwd or group file whose field-th
// colon-separated field is value.
func lookupField(readFile func(string) ([]byte, error), file, value string, field int) ([]string, bool) {
	b, err := readFile(file)
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) >= 4 && f[field] == value {
			return f, true
		}
	}
	return nil, false
}

// mergeEnv returns base with each of over's variables set, replacing one
// of the same name in place: the image's environment under the
// container's.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	at := map[string]int{}
	for _, kv := range append(append([]string{}, base...), over...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// pullSecrets returns the pod's image pull secrets that can be read; one
// that cannot is left out with an event, as the kubelet does.
func (w *Worker) pullSecrets(ctx context.Context, pod *corev1.Pod) []corev1.Secret {
	var out []corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var s *corev1.Secret
		err := errNoAPI
		if w.node.Volumes != nil {
			s, err = w.node.Volumes.Secret(ctx, pod.Namespace, ref.Name)
		}
		cancel()
		if err != nil {
			w.host.Event(pod, corev1.EventTypeWarning, "FailedToRetrieveImagePullSecret", "Unable to retrieve image pull secret %s/%s; the image pull may not succeed: %v", pod.Namespace, ref.Name, err)
			continue
		}
		out = append(out, *s)
	}
	return out
}

// errNoAPI is why a node without an API reads no Secret.
var errNoAPI = errors.New("this node reads nothing from the API")
