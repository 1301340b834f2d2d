// Package ifready holds the wire protocol of KEP-3028 "Retry during server
// initialization", shared by the server filter (pkg/ifready/ifreadyfilter) and
// the client option (pkg/ifready/ifreadyclient).
//
// A client that sends HeaderIfReady asks the server to refuse the request with
// 503 and Retry-After while it has not yet fully initialized, instead of serving
// an answer that may be inconsistent (403 before RBAC is loaded, 404 before CRDs
// are). The server tells it understood the header by setting HeaderReady on the
// response; a response without HeaderReady comes from a server that does not
// implement the protocol.
package ifready

import "net/http"

const (
	// HeaderIfReady is the request header a client sends to opt in. Its value
	// is ignored: presence alone counts, an empty value included.
	HeaderIfReady = "X-Kubernetes-If-Ready"
	// HeaderReady is the response header by which the server says whether it
	// had fully initialized when it answered ("true" or "false").
	HeaderReady = "X-Kubernetes-Ready"
)

// ServerAnswer is what a response says about the server's initialization, as
// far as the HeaderReady response header tells it.
type ServerAnswer int

const (
	// NoAnswer means no response has been seen yet.
	NoAnswer ServerAnswer = iota
	// NotUnderstood means the response carried no HeaderReady: the server does
	// not implement the protocol (an older server, or the option is off), so
	// its answers may have been prepared while it was initializing.
	NotUnderstood
	// Initializing means HeaderReady was "false": the server refused the request
	// because it has not yet fully initialized.
	Initializing
	// Ready means HeaderReady was "true": the server had fully initialized and
	// processed the request.
	Ready
	// Unrecognized means HeaderReady was present with a value other than "true"
	// or "false"; the server understood the header but said something this
	// client cannot interpret.
	Unrecognized
)

// String returns the answer's name, for logs.
func (a ServerAnswer) String() string {
	switch a {
	case NoAnswer:
		return "NoAnswer"
	case NotUnderstood:
		return "NotUnderstood"
	case Initializing:
		return "Initializing"
	case Ready:
		return "Ready"
	case Unrecognized:
		return "Unrecognized"
	}
	return "ServerAnswer(?)"
}

// AnswerFromHeader tells what a response's headers say about the server's
// initialization. It only reads the map and never allocates.
func AnswerFromHeader(h http.Header) ServerAnswer {
	values, ok := h[HeaderReady]
	if !ok || len(values) == 0 {
		return NotUnderstood
	}
	switch values[0] {
	case "true":
		return Ready
	case "false":
		return Initializing
	}
	return Unrecognized
}
