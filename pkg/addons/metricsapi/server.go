package metricsapi

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/pkg/version"
	cliflag "k8s.io/component-base/cli/flag"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	openapiutil "k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/metrics-server/cmd/metrics-server/app/options"
	"sigs.k8s.io/metrics-server/pkg/server"
)

// Server is metrics-server's configuration, from its own flags.
type Server struct {
	opts  *options.Options
	flags cliflag.NamedFlagSets
}

// NewServer is metrics-server with its defaults and its flags, as its own
// command has them.
func NewServer() *Server {
	o := options.NewOptions()
	return &Server{opts: o, flags: o.Flags()}
}

// PrintFlags writes metrics-server's flags, by section, to w.
func (s *Server) PrintFlags(w io.Writer) {
	cliflag.PrintSections(w, s.flags, 100)
}

// Run parses args (metrics-server's flags) and serves metrics.k8s.io
// until ctx ends.
func (s *Server) Run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet(Name, pflag.ContinueOnError)
	for _, f := range s.flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("metrics-server takes no arguments, got %q", fs.Args())
	}
	if s.opts.ShowVersion {
		fmt.Println(version.Get().GitVersion)
		return nil
	}
	if errs := s.opts.Validate(); len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	cfg, err := s.opts.ServerConfig()
	if err != nil {
		return err
	}
	directToNodes(cfg)
	cfg.Apiserver.OpenAPIConfig.GetDefinitions = withModelNames(cfg.Apiserver.OpenAPIConfig.GetDefinitions)
	v3 := cfg.Apiserver.OpenAPIV3Config
	v3.GetDefinitions = withModelNames(v3.GetDefinitions)
	// DefaultOpenAPIV3Config computed its definitions once, from the
	// unwrapped getter: again, with its own reference callback.
	v3.Definitions = v3.GetDefinitions(func(name string) spec.Ref {
		defName, _ := v3.GetDefinitionName(name)
		return spec.MustCreateRef("#/components/schemas/" + openapicommon.EscapeJsonPointer(defName))
	})
	srv, err := cfg.Complete()
	if err != nil {
		return err
	}
	return srv.RunUntil(ctx.Done())
}

// directToNodes makes metrics-server's client of the node agents a plain
// one. It starts as a copy of its API client, whose kubeconfig names the
// alternative-services auth provider: that provider's transport fails
// over between API servers and verifies peers with the cluster CA, which
// is right for the API and wrong for a node agent (its own address, its
// own CA). The token stays: the node agent authorizes metrics-server's
// service account as the kubelet does.
func directToNodes(cfg *server.Config) {
	cfg.Kubelet.Client.AuthProvider = nil
	cfg.Kubelet.Client.WrapTransport = nil
}

// withModelNames gives the definitions of get, and their references and
// dependencies, the OpenAPI model names of the types
// ("io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics" for
// "k8s.io/metrics/pkg/apis/metrics/v1beta1.NodeMetrics"). metrics-server's
// definitions were generated against Kubernetes 0.33 modules, keyed by Go
// path; the 0.36 types this binary links carry model names
// (OpenAPIModelName), by which the API server's spec builder looks them up.
// Each definition stays under its Go path too, for a type without a model
// name.
func withModelNames(get openapicommon.GetOpenAPIDefinitions) openapicommon.GetOpenAPIDefinitions {
	return func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		defs := get(func(name string) spec.Ref { return ref(modelName(name)) })
		out := make(map[string]openapicommon.OpenAPIDefinition, 2*len(defs))
		for name, def := range defs {
			deps := make([]string, len(def.Dependencies))
			for i, d := range def.Dependencies {
				deps[i] = modelName(d)
			}
			def.Dependencies = deps
			out[name] = def
			out[modelName(name)] = def
		}
		return out
	}
}

// modelName is the model name of a definition named by Go path
// ("k8s.io/api/core/v1.Pod"); a name without a path is one already.
func modelName(name string) string {
	if !strings.Contains(name, "/") {
		return name
	}
	return openapiutil.ToRESTFriendlyName(name)
}
