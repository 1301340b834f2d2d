// Package altsvcclient is the client half of KEP-3037 "client-go alternative
// services": an option on *rest.Config that lets any client-go user survive the
// loss of the API server it was configured with, without a load balancer.
//
//	cfg, _ := clientcmd.BuildConfigFromFlags("", kubeconfig)
//	pool, err := altsvcclient.Enable(cfg, altsvcclient.Options{})
//	cs := kubernetes.NewForConfigOrDie(cfg)
//
// The client learns the other API servers from the Alt-Svc header that
// steadyplane's API servers send to authenticated HTTP/2 clients (or from
// Options.Hosts, or a kubeconfig's steadyplane.io/alternative-services
// extension), and sends each request to one of them, chosen by Order. A host
// that cannot be reached is blocked for a while, one whose certificate does
// not verify is blocked for good. A request moves to another host only if
// that cannot duplicate it (MayResend). The round tripper never waits, and of
// status codes it only reads the KEP-3028 refusal (503 with
// X-Kubernetes-Ready: false), which is guaranteed unprocessed: client-go's own
// retry (429/5xx with Retry-After) works above it unchanged.
package altsvcclient
