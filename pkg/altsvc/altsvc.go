// Package altsvc reads and writes the HTTP Alt-Svc header (RFC 7838), the wire
// format of KEP-3037 "client-go alternative services": an API server lists the
// other API servers a client may use, e.g.
//
//	Alt-Svc: h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"; ma=3600
//
// The server side (pkg/altsvc/altsvcfilter) writes it with Format; the
// client side (pkg/altsvc/altsvcclient) reads it with Parse. Parse takes untrusted
// input: it is bounded in size and count, never panics, and its errors give the
// byte offset of the problem.
package altsvc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HeaderName is the response header that carries alternative services.
const HeaderName = "Alt-Svc"

// ProtocolHTTP2 is the ALPN protocol ID of HTTP/2 over TLS, the only protocol
// the API server advertises (KEP-3037 requires HTTPS with HTTP/2).
const ProtocolHTTP2 = "h2"

// DefaultMaxAge is how long an entry stays fresh when it carries no "ma"
// parameter (RFC 7838 section 3.1).
const DefaultMaxAge = 24 * time.Hour

// Limits on what Parse accepts; a larger header is refused whole.
const (
	MaxHeaderLength = 16 << 10
	MaxEntries      = 64
	// maxMaxAge caps "ma" so that adding it to a time never overflows.
	maxMaxAge = 10 * 365 * 24 * time.Hour
)

// Service is one alternative service: a protocol at host:port.
type Service struct {
	// Protocol is the ALPN protocol ID, percent-decoded (e.g. "h2").
	Protocol string
	// Host is an IP address or DNS name; empty means the origin's host.
	Host string
	// Port is the TCP port.
	Port int
	// MaxAge is how long the entry stays fresh, from the response that carried it.
	MaxAge time.Duration
	// Persist asks the client to keep the entry across network changes.
	Persist bool
}

// Authority returns host:port, with an IPv6 host in brackets.
func (s Service) Authority() string {
	return net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// Header is a parsed Alt-Svc header value.
type Header struct {
	// Clear is the special value "clear": forget every alternative learned from this origin.
	Clear bool
	// Services are the alternatives, in the server's order of preference.
	Services []Service
}

// SyntaxError says what is wrong with a header value and where.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("Alt-Svc: %s at byte %d", e.Msg, e.Offset)
}

// ErrTooLarge is returned for a header over MaxHeaderLength or MaxEntries.
var ErrTooLarge = errors.New("Alt-Svc: header too large")

// Parse parses one Alt-Svc header value. Several header lines are to be joined
// with ", " first (ParseValues does that). Unknown parameters are ignored, as
// RFC 7838 requires; empty list elements are skipped.
func Parse(value string) (Header, error) {
	if len(value) > MaxHeaderLength {
		return Header{}, ErrTooLarge
	}
	p := parser{s: value}
	p.skipSpace()
	if rest := strings.TrimRight(p.s[p.i:], " \t"); rest == "clear" {
		return Header{Clear: true}, nil
	}
	var h Header
	for {
		p.skipSpace()
		if p.eof() {
			return h, nil
		}
		if p.peek() == ',' { // empty list element
			p.i++
			continue
		}
		svc, err := p.alternative()
		if err != nil {
			return Header{}, err
		}
		if len(h.Services) == MaxEntries {
			return Header{}, ErrTooLarge
		}
		h.Services = append(h.Services, svc)
		p.skipSpace()
		if p.eof() {
			return h, nil
		}
		if p.peek() != ',' {
			return Header{}, p.errorf("expected ',' after an alternative, found %q", p.peek())
		}
		p.i++
	}
}

// ParseValues parses every Alt-Svc line of a response as one list.
func ParseValues(values []string) (Header, error) {
	return Parse(strings.Join(values, ", "))
}

// Format writes services as an Alt-Svc value; MaxAge is written in whole
// seconds when it differs from DefaultMaxAge. No services give "clear".
func Format(services []Service) string {
	if len(services) == 0 {
		return "clear"
	}
	var b strings.Builder
	for i, s := range services {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(encodeProtocol(s.Protocol))
		b.WriteString(`="`)
		b.WriteString(escapeQuoted(s.Authority()))
		b.WriteByte('"')
		if s.MaxAge != DefaultMaxAge && s.MaxAge >= 0 {
			b.WriteString("; ma=")
			b.WriteString(strconv.FormatInt(int64(s.MaxAge/time.Second), 10))
		}
		if s.Persist {
			b.WriteString("; persist=1")
		}
	}
	return b.String()
}

type parser struct {
	s string
	i int
}

func (p *parser) eof() bool  { return p.i >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.i] }

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.i, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// alternative reads protocol-id "=" alt-authority *( OWS ";" OWS parameter ).
func (p *parser) alternative() (Service, error) {
	start := p.i
	rawProto := p.token()
	if rawProto == "" {
		return Service{}, p.errorf("expected a protocol ID")
	}
	proto, err := url.PathUnescape(rawProto)
	if err != nil {
		return Service{}, &SyntaxError{Offset: start, Msg: fmt.Sprintf("protocol ID %q: bad percent-encoding", rawProto)}
	}
	if p.eof() || p.peek() != '=' {
		return Service{}, p.errorf("expected '=' after protocol ID %q", rawProto)
	}
	p.i++
	authStart := p.i
	auth, err := p.quoted()
	if err != nil {
		return Service{}, err
	}
	host, portStr, err := net.SplitHostPort(auth)
	if err != nil {
		return Service{}, &SyntaxError{Offset: authStart, Msg: fmt.Sprintf("alt-authority %q: %v", auth, err)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return Service{}, &SyntaxError{Offset: authStart, Msg: fmt.Sprintf("alt-authority %q: port %q is not 1-65535", auth, portStr)}
	}
	svc := Service{Protocol: proto, Host: host, Port: port, MaxAge: DefaultMaxAge}
	for {
		p.skipSpace()
		if p.eof() || p.peek() != ';' {
			return svc, nil
		}
		p.i++
		p.skipSpace()
		if p.eof() || p.peek() == ',' { // a trailing ";" with no parameter
			return svc, nil
		}
		name := p.token()
		if name == "" {
			return Service{}, p.errorf("expected a parameter name")
		}
		if p.eof() || p.peek() != '=' {
			return Service{}, p.errorf("expected '=' after parameter %q", name)
		}
		p.i++
		valStart := p.i
		var val string
		if !p.eof() && p.peek() == '"' {
			if val, err = p.quoted(); err != nil {
				return Service{}, err
			}
		} else if val = p.token(); val == "" {
			return Service{}, p.errorf("expected a value for parameter %q", name)
		}
		switch strings.ToLower(name) {
		case "ma":
			secs, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return Service{}, &SyntaxError{Offset: valStart, Msg: fmt.Sprintf("ma=%q is not a number of seconds", val)}
			}
			if secs > uint64(maxMaxAge/time.Second) {
				svc.MaxAge = maxMaxAge
			} else {
				svc.MaxAge = time.Duration(secs) * time.Second
			}
		case "persist":
			svc.Persist = val == "1"
		}
	}
}

// token reads an RFC 7230 token (possibly empty).
func (p *parser) token() string {
	start := p.i
	for !p.eof() && isTokenChar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads an RFC 7230 quoted-string and returns it unescaped.
func (p *parser) quoted() (string, error) {
	if p.eof() || p.peek() != '"' {
		return "", p.errorf("expected '\"'")
	}
	start := p.i
	p.i++
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c == '\\':
			p.i++
			if p.eof() {
				return "", p.errorf("unterminated escape")
			}
			if e := p.s[p.i]; isControl(e) {
				return "", p.errorf("control character 0x%02x in quoted string", e)
			}
			b.WriteByte(p.s[p.i])
		case isControl(c):
			return "", p.errorf("control character 0x%02x in quoted string", c)
		default:
			b.WriteByte(c)
		}
		p.i++
	}
	return "", &SyntaxError{Offset: start, Msg: "unterminated quoted string"}
}

// isControl reports the bytes RFC 7230 allows in a quoted string neither
// plain nor escaped.
func isControl(c byte) bool { return c < 0x20 && c != '\t' || c == 0x7f }

func isTokenChar(c byte) bool {
	if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// encodeProtocol percent-encodes the bytes of an ALPN ID that are not token
// characters, and '%' itself (RFC 7838 section 3).
func encodeProtocol(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if isTokenChar(c) && c != '%' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func escapeQuoted(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
