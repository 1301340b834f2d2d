package ifready

import (
	"net/http"
	"testing"
)

func TestAnswerFromHeader(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   ServerAnswer
	}{
		{"absent", http.Header{}, NotUnderstood},
		{"nil map", nil, NotUnderstood},
		{"present but no values", http.Header{HeaderReady: {}}, NotUnderstood},
		{"true", http.Header{HeaderReady: {"true"}}, Ready},
		{"false", http.Header{HeaderReady: {"false"}}, Initializing},
		{"other value", http.Header{HeaderReady: {"maybe"}}, Unrecognized},
		{"case matters in the value", http.Header{HeaderReady: {"True"}}, Unrecognized},
		{"first value wins", http.Header{HeaderReady: {"false", "true"}}, Initializing},
		{"other headers only", http.Header{"Retry-After": {"5"}}, NotUnderstood},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AnswerFromHeader(tc.header); got != tc.want {
				t.Errorf("AnswerFromHeader(%v) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestHeaderNamesAreCanonical(t *testing.T) {
	// The filter and the parser look headers up by direct map access, which
	// only works for canonical keys.
	for _, h := range []string{HeaderIfReady, HeaderReady} {
		if c := http.CanonicalHeaderKey(h); c != h {
			t.Errorf("%q is not canonical (%q)", h, c)
		}
	}
}

func TestServerAnswerString(t *testing.T) {
	seen := map[string]bool{}
	for a := NoAnswer; a <= Unrecognized; a++ {
		s := a.String()
		if s == "ServerAnswer(?)" || seen[s] {
			t.Errorf("answer %d has name %q", a, s)
		}
		seen[s] = true
	}
	if got := ServerAnswer(99).String(); got != "ServerAnswer(?)" {
		t.Errorf("unknown answer named %q", got)
	}
}
