// Package apiserver runs the upstream kube-apiserver, imported from
// k8s.io/kubernetes as a library, with steadyplane's filters wrapped around
// its default handler chain. Every upstream flag works unchanged; steadyplane
// adds its own in a separate flag section.
//
// It is the only package that imports k8s.io/kubernetes/cmd/kube-apiserver, so
// that the rest of the tree builds and tests quickly.
package apiserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/utils/clock"
	netutils "k8s.io/utils/net"

	"github.com/steadyplane/steadyplane/pkg/altsvc/altsvcfilter"
	"github.com/steadyplane/steadyplane/pkg/buildinfo"
	"github.com/steadyplane/steadyplane/pkg/ifready/ifreadyfilter"
)

// Options are steadyplane's additions to the kube-apiserver flags.
type Options struct {
	// SendRetryAfterIfNotInitialized enables the KEP-3028 filter.
	SendRetryAfterIfNotInitialized bool
	// RetryAfter is the delay the KEP-3028 filter asks clients to wait.
	RetryAfter time.Duration
	// InitializationProbeInterval is how often the server asks its own /readyz
	// until it first answers 200.
	InitializationProbeInterval time.Duration
	// EnableAlternativeServices enables the KEP-3037 Alt-Svc filter.
	EnableAlternativeServices bool
	// AlternativeServicesMaxAge is the "ma" of each advertised API server.
	AlternativeServicesMaxAge time.Duration
	// AdditionalBindAddresses are addresses the secure port also listens
	// on, besides --bind-address: "up" keeps clients on loopback and gives
	// pods the address on the pod bridge.
	AdditionalBindAddresses []net.IP
	// TestUnfinishedPostStartHook adds a post-start hook that never
	// finishes: a revision that starts and never becomes ready, for the
	// fallback's tests (a hidden flag).
	TestUnfinishedPostStartHook bool

	// serving, when set, is closed by Run once the server is about to
	// serve: until then a stop signal has nothing to drain.
	serving chan struct{}
}

// UnfinishedPostStartHook names the test-only hook that never finishes.
const UnfinishedPostStartHook = "steadyplane-test-never-finishes"

// NewOptions returns the defaults of "steadyplane apiserver": every addition off.
func NewOptions() *Options {
	return &Options{
		RetryAfter:                  ifreadyfilter.DefaultRetryAfter,
		InitializationProbeInterval: ifreadyfilter.DefaultProbeInterval,
		AlternativeServicesMaxAge:   altsvcfilter.DefaultMaxAge,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.SendRetryAfterIfNotInitialized, "startup-send-retry-after-if-not-initialized", o.SendRetryAfterIfNotInitialized,
		"Answer requests that carry X-Kubernetes-If-Ready with 503 and Retry-After until /readyz has first answered OK, and mark them X-Kubernetes-Ready: true after (KEP-3028).")
	fs.DurationVar(&o.RetryAfter, "startup-retry-after", o.RetryAfter,
		"Delay sent in Retry-After while the server initializes; rounded to whole seconds, at least 1s.")
	fs.DurationVar(&o.InitializationProbeInterval, "startup-readyz-probe-interval", o.InitializationProbeInterval,
		"How often the server checks its own /readyz until it first answers OK.")
	fs.BoolVar(&o.EnableAlternativeServices, "enable-alternative-services", o.EnableAlternativeServices,
		"Send authenticated HTTP/2 clients an Alt-Svc header listing the ready API servers of the default/kubernetes Endpoints, so that clients can fail over without a load balancer (KEP-3037). Nothing is sent while fewer than two API servers are live.")
	fs.DurationVar(&o.AlternativeServicesMaxAge, "alternative-services-max-age", o.AlternativeServicesMaxAge,
		"How long a client may keep an advertised API server it has not heard of again (the Alt-Svc ma parameter).")
	fs.IPSliceVar(&o.AdditionalBindAddresses, "additional-bind-addresses", nil,
		"Addresses the secure port also listens on, besides --bind-address (comma-separated), e.g. an address pods reach while clients use loopback.")
	fs.BoolVar(&o.TestUnfinishedPostStartHook, "test-unfinished-post-start-hook", false,
		"For tests only: add post-start hook "+UnfinishedPostStartHook+", which never finishes, so that the server never becomes ready.")
	_ = fs.MarkHidden("test-unfinished-post-start-hook")
}

// Validate reports every invalid option.
func (o *Options) Validate() []error {
	var errs []error
	if o.RetryAfter < 0 || o.RetryAfter > time.Hour {
		errs = append(errs, fmt.Errorf("--startup-retry-after=%v: want between 0 and 1h", o.RetryAfter))
	}
	if o.InitializationProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("--startup-readyz-probe-interval=%v: want a positive duration", o.InitializationProbeInterval))
	}
	if o.AlternativeServicesMaxAge < time.Second || o.AlternativeServicesMaxAge > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("--alternative-services-max-age=%v: want between 1s and 168h", o.AlternativeServicesMaxAge))
	}
	return errs
}

// NewCommand returns "steadyplane apiserver": the upstream kube-apiserver
// command (same flags, same validation, same run steps) with steadyplane's
// options added. It follows app.NewAPIServerCommand step for step; the only
// difference is that Run changes the configuration between NewConfig and
// Complete.
func NewCommand() *cobra.Command {
	s := options.NewServerRunOptions()
	sp := NewOptions()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the Kubernetes API server (all kube-apiserver flags) with steadyplane's filters",
		Long: `Run the real kube-apiserver, imported from k8s.io/kubernetes, with steadyplane's
availability filters wrapped around its handler chain. Every kube-apiserver flag works
as upstream documents it; steadyplane's own flags are listed in their own section.`,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			// The server's loopback clients should not log warnings it issued itself.
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			fs := cmd.Flags()
			if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(fs)
			// Upstream's signal handling: the first SIGTERM/SIGINT starts a
			// graceful shutdown, a second one exits at once.
			ctx := genericapiserver.SetupSignalContext()
			completed, err := s.Complete(ctx)
			if err != nil {
				return err
			}
			errs := completed.Validate()
			errs = append(errs, sp.Validate()...)
			if len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			featureGate.(featuregate.MutableFeatureGate).AddMetrics()
			s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
			sp.serving = make(chan struct{})
			go exitIfStoppedBeforeServing(ctx, sp.serving)
			return Run(ctx, completed, sp)
		},
		Args: cobra.NoArgs,
	}

	fs := cmd.Flags()
	namedFlagSets := s.Flags()
	sp.AddFlags(namedFlagSets.FlagSet("steadyplane"))
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	verflag.AddFlags(namedFlagSets.FlagSet("global"))
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, namedFlagSets, cols)
	return cmd
}

// Run runs the API server until ctx ends, doing app.Run's five steps and
// installing steadyplane's filters into the configuration in between.
func Run(ctx context.Context, opts options.CompletedOptions, sp *Options) error {
	if len(sp.AdditionalBindAddresses) > 0 && opts.SecureServing.Listener == nil {
		ln, err := listenAll(opts.SecureServing.BindAddress, opts.SecureServing.BindPort, sp.AdditionalBindAddresses)
		if err != nil {
			return err
		}
		// The generic server takes a listener given to it as its own,
		// and reports the first address as where it serves.
		opts.SecureServing.Listener = ln
	}
	config, err := app.NewConfig(opts)
	if err != nil {
		return err
	}
	// The aggregator is the last server of the delegation chain: its handler
	// chain is the one that serves; the inner servers' chains are never used.
	InstallFilters(&config.Aggregator.GenericConfig.Config, sp, clock.RealClock{})
	if cert := opts.Extra.KubeletConfig.TLSClientConfig.CertFile; cert != "" {
		if err := installKubeletClientAccess(&config.Aggregator.GenericConfig.Config, cert); err != nil {
			return err
		}
	}
	installRBAC(&config.Aggregator.GenericConfig.Config, "steadyplane-node-peers-rbac", nodePeersAccess()...)
	for _, c := range []*genericapiserver.Config{&config.Aggregator.GenericConfig.Config, config.KubeAPIs.ControlPlane.Generic, &config.ApiExtensions.GenericConfig.Config} {
		c.EffectiveVersion = withGitVersion(c.EffectiveVersion, buildinfo.KubernetesGitVersion())
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return err
	}
	if sp.serving != nil {
		close(sp.serving)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}

// InstallFilters wraps c's handler chain with the filters sp enables, and adds
// the post-start hooks they need. With every option off it leaves c as it is,
// so the server behaves exactly as upstream's (it never sets
// X-Kubernetes-Ready, which is how clients tell an older server).
func InstallFilters(c *genericapiserver.Config, sp *Options, clk clock.PassiveClock) {
	if sp.EnableAlternativeServices {
		installAlternativeServices(c, sp.AlternativeServicesMaxAge)
	}
	if sp.SendRetryAfterIfNotInitialized {
		installRetryAfterUntilInitialized(c, sp, clk)
	}
	if sp.TestUnfinishedPostStartHook {
		c.AddPostStartHookOrDie(UnfinishedPostStartHook, func(hc genericapiserver.PostStartHookContext) error {
			klog.InfoS("Test-only post-start hook: never finishing", "hook", UnfinishedPostStartHook)
			<-hc.Done()
			return nil
		})
	}
}

// installAlternativeServices puts the KEP-3037 filter around the API handler,
// inside authentication: only authenticated callers learn the addresses.
func installAlternativeServices(c *genericapiserver.Config, maxAge time.Duration) {
	altsvcfilter.RegisterMetrics()
	adv := &altsvcfilter.Advertisement{}
	base := c.BuildHandlerChainFunc
	c.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		return base(altsvcfilter.WithAlternativeServices(apiHandler, adv), c)
	}
	c.AddPostStartHookOrDie("steadyplane-alternative-services", func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return fmt.Errorf("loopback client for alternative services: %w", err)
		}
		go altsvcfilter.Watch(hc, client, adv, maxAge)
		return nil
	})
	klog.InfoS("KEP-3037 enabled: authenticated HTTP/2 clients are sent Alt-Svc with the ready API servers", "maxAge", maxAge)
}

func installRetryAfterUntilInitialized(c *genericapiserver.Config, sp *Options, clk clock.PassiveClock) {
	ifreadyfilter.RegisterMetrics()
	latch := ifreadyfilter.NewLatch(clk)
	base := c.BuildHandlerChainFunc
	c.BuildHandlerChainFunc = func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		// Outermost, so that the refusal comes before authorization and
		// admission, whose answers during initialization are what it protects
		// clients from.
		return ifreadyfilter.WithRetryAfterUntilInitialized(base(apiHandler, c), latch, sp.RetryAfter)
	}
	interval := sp.InitializationProbeInterval
	c.AddPostStartHookOrDie("steadyplane-initialization-probe", func(hc genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
		if err != nil {
			return fmt.Errorf("loopback client for the initialization probe: %w", err)
		}
		// Returns at once: the probe waits for /readyz, which waits for every
		// post-start hook, this one included.
		go ifreadyfilter.ProbeUntilInitialized(hc, client.Discovery().RESTClient(), latch, interval)
		return nil
	})
	klog.InfoS("KEP-3028 enabled: requests with X-Kubernetes-If-Ready are refused until /readyz first answers OK", "retryAfter", sp.RetryAfter)
}

// reportedVersion is an EffectiveVersion whose Info carries a gitVersion that
// clients can parse (see pkg/buildinfo); everything else is upstream's.
type reportedVersion struct {
	basecompatibility.EffectiveVersion
	gitVersion string
}

// Info implements basecompatibility.EffectiveVersion.
func (v reportedVersion) Info() *apimachineryversion.Info {
	info := v.EffectiveVersion.Info()
	if info != nil {
		info.GitVersion = v.gitVersion
	}
	return info
}

func withGitVersion(ev basecompatibility.EffectiveVersion, gitVersion string) basecompatibility.EffectiveVersion {
	if ev == nil || gitVersion == "" {
		return ev
	}
	if rv, ok := ev.(reportedVersion); ok {
		ev = rv.EffectiveVersion
	}
	return reportedVersion{EffectiveVersion: ev, gitVersion: gitVersion}
}

// listenAll listens on port at bind and at each of also (which an
// unspecified bind address already covers).
func listenAll(bind net.IP, port int, also []net.IP) (net.Listener, error) {
	addrs := []string{net.JoinHostPort(bind.String(), strconv.Itoa(port))}
	for _, ip := range also {
		if ip.Equal(bind) || bind.IsUnspecified() {
			continue
		}
		addrs = append(addrs, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	}
	ln, err := netutils.MultiListen(context.Background(), "tcp", addrs...)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", strings.Join(addrs, ", "), err)
	}
	return ln, nil
}

// exitIfStoppedBeforeServing exits the process at once when ctx ends (a
// stop signal) before serving is closed. Building the server can wait for
// etcd for as long as its dial timeout (20s) without looking at ctx, and
// no request is there to drain: a revision that cannot reach etcd, which
// its startup monitor has just replaced, would otherwise hold the node's
// API server port for that long.
func exitIfStoppedBeforeServing(ctx context.Context, serving <-chan struct{}) {
	select {
	case <-serving:
	case <-ctx.Done():
		klog.InfoS("Stopped before serving: nothing to drain, exiting now")
		klog.Flush()
		os.Exit(0)
	}
}
