package altsvc

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func h2(host string, port int, ma time.Duration) Service {
	return Service{Protocol: "h2", Host: host, Port: port, MaxAge: ma}
}

func TestParse(t *testing.T) {
	day := DefaultMaxAge
	tests := []struct {
		name    string
		in      string
		want    Header
		wantErr string // substring; empty means success
	}{
		{name: "one", in: `h2="10.0.0.2:6443"`, want: Header{Services: []Service{h2("10.0.0.2", 6443, day)}}},
		{name: "kep example", in: `h2="10.0.0.2:6443", h2="10.0.0.3:6443", h2="10.0.0.4:6443"`,
			want: Header{Services: []Service{h2("10.0.0.2", 6443, day), h2("10.0.0.3", 6443, day), h2("10.0.0.4", 6443, day)}}},
		{name: "max age", in: `h2="10.0.0.2:6443"; ma=60`, want: Header{Services: []Service{h2("10.0.0.2", 6443, time.Minute)}}},
		{name: "max age zero", in: `h2="a:1";ma=0`, want: Header{Services: []Service{h2("a", 1, 0)}}},
		{name: "max age quoted", in: `h2="a:1"; ma="30"`, want: Header{Services: []Service{h2("a", 1, 30*time.Second)}}},
		{name: "max age capped, no overflow", in: `h2="a:1"; ma=99999999999999999999`, wantErr: "ma="},
		{name: "max age huge but a number", in: `h2="a:1"; ma=18446744073709551615`, want: Header{Services: []Service{h2("a", 1, maxMaxAge)}}},
		{name: "persist", in: `h2="a:1"; persist=1`, want: Header{Services: []Service{{Protocol: "h2", Host: "a", Port: 1, MaxAge: day, Persist: true}}}},
		{name: "persist other value ignored", in: `h2="a:1"; persist=2`, want: Header{Services: []Service{h2("a", 1, day)}}},
		{name: "unknown parameters ignored", in: `h2="a:1"; foo=bar; x="y;z"; ma=5`, want: Header{Services: []Service{h2("a", 1, 5*time.Second)}}},
		{name: "parameter names case-insensitive", in: `h2="a:1"; MA=5`, want: Header{Services: []Service{h2("a", 1, 5*time.Second)}}},
		{name: "ipv6 in brackets", in: `h2="[2001:db8::1]:6443"`, want: Header{Services: []Service{h2("2001:db8::1", 6443, day)}}},
		{name: "origin host", in: `h2=":8443"`, want: Header{Services: []Service{h2("", 8443, day)}}},
		{name: "percent-encoded protocol", in: `w%3Dx%3Ay="a:1"`, want: Header{Services: []Service{{Protocol: "w=x:y", Host: "a", Port: 1, MaxAge: day}}}},
		{name: "escaped quote in authority", in: `h2="a\"b:1"`, want: Header{Services: []Service{h2(`a"b`, 1, day)}}},
		{name: "other protocols kept", in: `h3="a:1", h2="b:2"`, want: Header{Services: []Service{{Protocol: "h3", Host: "a", Port: 1, MaxAge: day}, h2("b", 2, day)}}},
		{name: "empty elements", in: ` , h2="a:1" ,, h2="b:2", `, want: Header{Services: []Service{h2("a", 1, day), h2("b", 2, day)}}},
		{name: "trailing semicolon", in: `h2="a:1";`, want: Header{Services: []Service{h2("a", 1, day)}}},
		{name: "tabs", in: "h2=\"a:1\"\t;\tma=1", want: Header{Services: []Service{h2("a", 1, time.Second)}}},
		{name: "clear", in: `clear`, want: Header{Clear: true}},
		{name: "clear with spaces", in: `  clear `, want: Header{Clear: true}},
		{name: "empty", in: ``, want: Header{}},
		{name: "Clear is not clear", in: `Clear`, wantErr: "expected '='"},
		{name: "clear in a list", in: `clear, h2="a:1"`, wantErr: "expected '='"},
		{name: "no quotes", in: `h2=a:1`, wantErr: `expected '"'`},
		{name: "unterminated", in: `h2="a:1`, wantErr: "unterminated quoted string"},
		{name: "unterminated escape", in: `h2="a:1\`, wantErr: "unterminated escape"},
		{name: "no port", in: `h2="a"`, wantErr: "missing port"},
		{name: "port zero", in: `h2="a:0"`, wantErr: "not 1-65535"},
		{name: "port too big", in: `h2="a:65536"`, wantErr: "not 1-65535"},
		{name: "port not a number", in: `h2="a:x"`, wantErr: "not 1-65535"},
		{name: "ipv6 without brackets", in: `h2="2001:db8::1:6443"`, wantErr: "too many colons"},
		{name: "bad percent", in: `h%zz="a:1"`, wantErr: "bad percent-encoding"},
		{name: "no protocol", in: `="a:1"`, wantErr: "expected a protocol ID"},
		{name: "garbage after", in: `h2="a:1" x`, wantErr: "expected ','"},
		{name: "parameter without value", in: `h2="a:1"; ma`, wantErr: "expected '=' after parameter"},
		{name: "parameter empty value", in: `h2="a:1"; ma=`, wantErr: "expected a value"},
		{name: "negative ma", in: `h2="a:1"; ma=-1`, wantErr: "not a number of seconds"},
		{name: "control character", in: "h2=\"a\x01:1\"", wantErr: "control character"},
		{name: "bad parameter name", in: `h2="a:1"; =1`, wantErr: "expected a parameter name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %+v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Errorf("error %v is not a *SyntaxError with an offset", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) =\n %+v\nwant\n %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseLimits(t *testing.T) {
	if _, err := Parse(strings.Repeat(" ", MaxHeaderLength+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over-long header: %v, want ErrTooLarge", err)
	}
	many := strings.TrimSuffix(strings.Repeat(`h2="a:1",`, MaxEntries+1), ",")
	if _, err := Parse(many); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d entries: %v, want ErrTooLarge", MaxEntries+1, err)
	}
	enough := strings.TrimSuffix(strings.Repeat(`h2="a:1",`, MaxEntries), ",")
	if h, err := Parse(enough); err != nil || len(h.Services) != MaxEntries {
		t.Errorf("%d entries: %d parsed, %v", MaxEntries, len(h.Services), err)
	}
}

func TestParseValuesJoinsLines(t *testing.T) {
	h, err := ParseValues([]string{`h2="a:1"`, `h2="b:2"; ma=3`})
	if err != nil || len(h.Services) != 2 || h.Services[1].MaxAge != 3*time.Second {
		t.Fatalf("ParseValues = %+v, %v", h, err)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		in   []Service
		want string
	}{
		{nil, "clear"},
		{[]Service{h2("10.0.0.2", 6443, time.Hour)}, `h2="10.0.0.2:6443"; ma=3600`},
		{[]Service{h2("10.0.0.2", 6443, DefaultMaxAge), h2("2001:db8::1", 443, 0)}, `h2="10.0.0.2:6443", h2="[2001:db8::1]:443"; ma=0`},
		{[]Service{{Protocol: "w=x", Host: `a"b`, Port: 1, MaxAge: DefaultMaxAge, Persist: true}}, `w%3Dx="a\"b:1"; persist=1`},
	}
	for _, tt := range tests {
		if got := Format(tt.in); got != tt.want {
			t.Errorf("Format(%+v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	v := `h2="10.0.0.2:6443"; ma=3600, h2="10.0.0.3:6443"; ma=3600, h2="10.0.0.4:6443"; ma=3600`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(v); err != nil {
			b.Fatal(err)
		}
	}
}
