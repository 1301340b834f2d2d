// Package etcd runs an etcd member in-process with go.etcd.io/etcd/server/v3/embed.
// steadyplane starts it as its own process ("steadyplane etcd"), so that an API
// server revision can crash or be replaced without taking the data with it.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
)

// Options are the settings of one etcd member. Flag names are etcd's own.
type Options struct {
	Name    string
	DataDir string

	ListenClientURLs         []string
	AdvertiseClientURLs      []string
	ListenPeerURLs           []string
	InitialAdvertisePeerURLs []string
	ListenMetricsURLs        []string

	InitialCluster      string
	InitialClusterState string
	InitialClusterToken string

	CertFile, KeyFile, TrustedCAFile             string
	ClientCertAuth                               bool
	PeerCertFile, PeerKeyFile, PeerTrustedCAFile string
	PeerClientCertAuth                           bool

	// ForceNewCluster makes the member a cluster of one, keeping its data
	// (the recovery when the other members are lost for good).
	ForceNewCluster bool

	// HeartbeatMs and ElectionMs are the raft heartbeat interval and
	// election timeout in milliseconds (etcd's 100 and 1000 by default).
	HeartbeatMs, ElectionMs uint

	LogLevel string
	// StartTimeout bounds how long Run waits for the member to become ready.
	StartTimeout time.Duration
}

// NewOptions returns etcd's defaults for a single member named "default".
func NewOptions() *Options {
	return &Options{
		Name:                     "default",
		ListenClientURLs:         []string{"http://localhost:2379"},
		ListenPeerURLs:           []string{"http://localhost:2380"},
		InitialAdvertisePeerURLs: []string{"http://localhost:2380"},
		InitialClusterState:      embed.ClusterStateFlagNew,
		InitialClusterToken:      "etcd-cluster",
		ClientCertAuth:           true,
		PeerClientCertAuth:       true,
		LogLevel:                 "info",
		StartTimeout:             2 * time.Minute,
		HeartbeatMs:              100,
		ElectionMs:               1000,
	}
}

// AddFlags registers the options on fs, under etcd's own flag names.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", o.Name, "Human-readable name of this member, unique in the cluster.")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Directory of the member's data; defaults to <name>.etcd.")
	fs.StringSliceVar(&o.ListenClientURLs, "listen-client-urls", o.ListenClientURLs, "URLs to serve clients on (https:// when --cert-file is set).")
	fs.StringSliceVar(&o.AdvertiseClientURLs, "advertise-client-urls", o.AdvertiseClientURLs, "Client URLs announced to the cluster; defaults to --listen-client-urls.")
	fs.StringSliceVar(&o.ListenPeerURLs, "listen-peer-urls", o.ListenPeerURLs, "URLs to serve the other members on.")
	fs.StringSliceVar(&o.InitialAdvertisePeerURLs, "initial-advertise-peer-urls", o.InitialAdvertisePeerURLs, "Peer URLs announced to the cluster.")
	fs.StringSliceVar(&o.ListenMetricsURLs, "listen-metrics-urls", o.ListenMetricsURLs, "Extra URLs serving only /metrics and /health.")
	fs.StringVar(&o.InitialCluster, "initial-cluster", o.InitialCluster, "Members at bootstrap, as name=peerURL,...; defaults to this member alone.")
	fs.StringVar(&o.InitialClusterState, "initial-cluster-state", o.InitialClusterState, "'new' to bootstrap a cluster, 'existing' to join one. Ignored once the data directory holds data.")
	fs.StringVar(&o.InitialClusterToken, "initial-cluster-token", o.InitialClusterToken, "Token that tells this cluster's bootstrap apart from others'.")
	fs.StringVar(&o.CertFile, "cert-file", o.CertFile, "Serving certificate for client traffic.")
	fs.StringVar(&o.KeyFile, "key-file", o.KeyFile, "Key of --cert-file.")
	fs.StringVar(&o.TrustedCAFile, "trusted-ca-file", o.TrustedCAFile, "CA that client certificates must chain to.")
	fs.BoolVar(&o.ClientCertAuth, "client-cert-auth", o.ClientCertAuth, "Require a client certificate signed by --trusted-ca-file (when it is set).")
	fs.StringVar(&o.PeerCertFile, "peer-cert-file", o.PeerCertFile, "Certificate for peer traffic, served and presented.")
	fs.StringVar(&o.PeerKeyFile, "peer-key-file", o.PeerKeyFile, "Key of --peer-cert-file.")
	fs.StringVar(&o.PeerTrustedCAFile, "peer-trusted-ca-file", o.PeerTrustedCAFile, "CA that peer certificates must chain to.")
	fs.BoolVar(&o.PeerClientCertAuth, "peer-client-cert-auth", o.PeerClientCertAuth, "Require peers to present a certificate signed by --peer-trusted-ca-file (when it is set).")
	fs.BoolVar(&o.ForceNewCluster, "force-new-cluster", o.ForceNewCluster, "Make this member a cluster of one, with its data, dropping every other member (after the loss of quorum for good; unsafe otherwise).")
	fs.UintVar(&o.HeartbeatMs, "heartbeat-interval", o.HeartbeatMs, "Time (in milliseconds) of a heartbeat interval.")
	fs.UintVar(&o.ElectionMs, "election-timeout", o.ElectionMs, "Time (in milliseconds) for an election to timeout; at least 5 heartbeat intervals.")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn, error, panic or fatal.")
	fs.DurationVar(&o.StartTimeout, "start-timeout", o.StartTimeout, "How long to wait for the member to become ready before giving up.")
}

// Config turns the options into an embed.Config, checking them first; every
// error names the flag at fault.
func (o *Options) Config() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	if cfg.Dir == "" {
		cfg.Dir = o.Name + ".etcd"
	}
	var err error
	if cfg.ListenClientUrls, err = parseURLs("listen-client-urls", o.ListenClientURLs); err != nil {
		return nil, err
	}
	advertise := o.AdvertiseClientURLs
	if len(advertise) == 0 {
		advertise = o.ListenClientURLs
	}
	if cfg.AdvertiseClientUrls, err = parseURLs("advertise-client-urls", advertise); err != nil {
		return nil, err
	}
	if cfg.ListenPeerUrls, err = parseURLs("listen-peer-urls", o.ListenPeerURLs); err != nil {
		return nil, err
	}
	if cfg.AdvertisePeerUrls, err = parseURLs("initial-advertise-peer-urls", o.InitialAdvertisePeerURLs); err != nil {
		return nil, err
	}
	if len(o.ListenMetricsURLs) > 0 {
		if cfg.ListenMetricsUrls, err = parseURLs("listen-metrics-urls", o.ListenMetricsURLs); err != nil {
			return nil, err
		}
	}
	cfg.InitialCluster = o.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(o.Name)
	}
	members, err := types.NewURLsMap(cfg.InitialCluster)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster=%q: %w", cfg.InitialCluster, err)
	}
	if _, ok := members[o.Name]; !ok {
		return nil, fmt.Errorf("--initial-cluster=%q does not list this member (--name=%s)", cfg.InitialCluster, o.Name)
	}
	switch o.InitialClusterState {
	case embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting:
		cfg.ClusterState = o.InitialClusterState
	default:
		return nil, fmt.Errorf("--initial-cluster-state=%q: want %q or %q", o.InitialClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	cfg.InitialClusterToken = o.InitialClusterToken
	cfg.ForceNewCluster = o.ForceNewCluster
	if o.ElectionMs < 5*o.HeartbeatMs || o.HeartbeatMs == 0 {
		return nil, fmt.Errorf("--election-timeout=%d must be at least 5 times --heartbeat-interval=%d (and that above 0)", o.ElectionMs, o.HeartbeatMs)
	}
	cfg.TickMs, cfg.ElectionMs = o.HeartbeatMs, o.ElectionMs

	if err := tlsPair("cert-file", o.CertFile, "key-file", o.KeyFile); err != nil {
		return nil, err
	}
	if err := tlsPair("peer-cert-file", o.PeerCertFile, "peer-key-file", o.PeerKeyFile); err != nil {
		return nil, err
	}
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = o.CertFile, o.KeyFile
	cfg.ClientTLSInfo.TrustedCAFile = o.TrustedCAFile
	cfg.ClientTLSInfo.ClientCertAuth = o.ClientCertAuth && o.TrustedCAFile != ""
	cfg.PeerTLSInfo.CertFile, cfg.PeerTLSInfo.KeyFile = o.PeerCertFile, o.PeerKeyFile
	cfg.PeerTLSInfo.TrustedCAFile = o.PeerTrustedCAFile
	cfg.PeerTLSInfo.ClientCertAuth = o.PeerClientCertAuth && o.PeerTrustedCAFile != ""
	if err := schemesMatchTLS("listen-client-urls", o.ListenClientURLs, o.CertFile != ""); err != nil {
		return nil, err
	}
	if err := schemesMatchTLS("listen-peer-urls", o.ListenPeerURLs, o.PeerCertFile != ""); err != nil {
		return nil, err
	}

	cfg.Logger = "zap"
	cfg.LogLevel = o.LogLevel
	cfg.LogOutputs = []string{embed.StdErrLogOutput}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("etcd configuration: %w", err)
	}
	return cfg, nil
}

func parseURLs(flag string, in []string) ([]url.URL, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("--%s: at least one URL is needed", flag)
	}
	out := make([]url.URL, 0, len(in))
	for _, s := range in {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q: %w", flag, s, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix" && u.Scheme != "unixs") || u.Host == "" {
			return nil, fmt.Errorf("--%s: %q is not a URL like https://127.0.0.1:2379", flag, s)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("--%s: %q must not have a path", flag, s)
		}
		out = append(out, *u)
	}
	return out, nil
}

func tlsPair(certFlag, cert, keyFlag, key string) error {
	if (cert == "") != (key == "") {
		return fmt.Errorf("--%s and --%s go together", certFlag, keyFlag)
	}
	return nil
}

// schemesMatchTLS rejects the two silent mistakes: certificates given but an
// http:// listener (traffic would go in clear), or https:// without them.
func schemesMatchTLS(flag string, urls []string, haveCert bool) error {
	for _, s := range urls {
		secure := strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "unixs://")
		if haveCert && !secure {
			return fmt.Errorf("--%s: %q is plain text although certificates are given; use https://", flag, s)
		}
		if !haveCert && secure {
			return fmt.Errorf("--%s: %q needs a certificate (--cert-file/--peer-cert-file)", flag, s)
		}
	}
	return nil
}

// Run starts the member and serves until ctx ends or etcd fails. onReady, if
// not nil, is called once the member has joined its cluster and serves clients.
func Run(ctx context.Context, o *Options, onReady func(*embed.Etcd)) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd member %s: %w", o.Name, err)
	}
	defer e.Close()

	timeout := time.NewTimer(o.StartTimeout)
	defer timeout.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s failed while starting: %w", o.Name, err)
	case <-timeout.C:
		e.Server.Stop()
		return fmt.Errorf("etcd member %s not ready after %v (are the other members of --initial-cluster up?)", o.Name, o.StartTimeout)
	case <-ctx.Done():
		return nil
	}
	if onReady != nil {
		onReady(e)
	}
	select {
	case err := <-e.Err():
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("etcd member %s: %w", o.Name, err)
		}
		return nil
	case <-ctx.Done():
		return nil
	}
}
