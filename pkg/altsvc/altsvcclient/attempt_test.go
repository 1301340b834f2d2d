package altsvcclient

import (
	"net/http"
	"net/url"
	"testing"
)

func TestAfterAttempt(t *testing.T) {
	for _, tt := range []struct {
		name string
		a    Attempt
		want Decision
	}{
		{"an answer is delivered", Attempt{Responded: true, Method: "GET", BodyReplayable: true},
			Decision{Verdict: Deliver, Result: "ok"}},
		{"an error status is delivered: client-go retries it", Attempt{Responded: true, Failure: NotHostFailure, Method: "POST"},
			Decision{Verdict: Deliver, Result: "ok"}},
		{"a refusal moves on, kept", Attempt{Responded: true, Failure: NotReadyFailure, Method: "POST", BodyReplayable: true},
			Decision{Verdict: KeepAndTryNext, CountsAgainstHost: true, Result: "not ready"}},
		{"a refusal on the last host is delivered", Attempt{Responded: true, Failure: NotReadyFailure, Method: "GET", BodyReplayable: true, Last: true},
			Decision{Verdict: Deliver, CountsAgainstHost: true, Result: "not ready"}},
		{"a refusal of a body that cannot be replayed is delivered", Attempt{Responded: true, Failure: NotReadyFailure, Method: "POST"},
			Decision{Verdict: Deliver, CountsAgainstHost: true, Result: "not ready"}},
		{"the caller's end is given up on", Attempt{Canceled: true, Failure: NetworkFailure, Method: "GET", BodyReplayable: true},
			Decision{Verdict: GiveUp, Result: "canceled"}},
		{"an error not the host's is given up on", Attempt{Failure: NotHostFailure, Method: "GET", BodyReplayable: true},
			Decision{Verdict: GiveUp, Result: "not the host's fault"}},
		{"a dial failure moves any method", Attempt{Failure: NetworkFailure, Method: "POST", BodyReplayable: true},
			Decision{Verdict: TryNext, CountsAgainstHost: true, Result: "network"}},
		{"a broken connection moves a GET", Attempt{Failure: NetworkFailure, Method: "GET", BodyReplayable: true, Connected: true},
			Decision{Verdict: TryNext, CountsAgainstHost: true, Result: "network"}},
		{"a broken connection does not move a POST, whose outcome is unknown", Attempt{Failure: NetworkFailure, Method: "POST", BodyReplayable: true, Connected: true},
			Decision{Verdict: GiveUp, CountsAgainstHost: true, Result: "network", OutcomeUnknown: true}},
		{"a broken connection moves a write that takes effect at most once", Attempt{Failure: NetworkFailure, Method: "PUT", BodyReplayable: true, Connected: true, AtMostOnce: true},
			Decision{Verdict: TryNext, CountsAgainstHost: true, Result: "network", OutcomeUnknown: true}},
		{"not when its body cannot be replayed", Attempt{Failure: NetworkFailure, Method: "DELETE", Connected: true, AtMostOnce: true},
			Decision{Verdict: GiveUp, CountsAgainstHost: true, Result: "network", OutcomeUnknown: true}},
		{"an unconditional update stays", Attempt{Failure: NetworkFailure, Method: "PUT", BodyReplayable: true, Connected: true},
			Decision{Verdict: GiveUp, CountsAgainstHost: true, Result: "network", OutcomeUnknown: true}},
		{"a write the caller ended is not unknown to it", Attempt{Canceled: true, Failure: NetworkFailure, Method: "POST", BodyReplayable: true, Connected: true},
			Decision{Verdict: GiveUp, Result: "canceled"}},
		{"a body that cannot be replayed stays", Attempt{Failure: NetworkFailure, Method: "PUT"},
			Decision{Verdict: GiveUp, CountsAgainstHost: true, Result: "network"}},
		{"a certificate failure moves on and counts", Attempt{Failure: CertificateFailure, Method: "GET", BodyReplayable: true, Connected: true},
			Decision{Verdict: TryNext, CountsAgainstHost: true, Result: "certificate"}},
		{"an error on the last host still counts", Attempt{Failure: NetworkFailure, Method: "GET", BodyReplayable: true, Last: true},
			Decision{Verdict: TryNext, CountsAgainstHost: true, Result: "network"}},
	} {
		if got := AfterAttempt(tt.a); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestIsStreamingAgreesWithParseQuery(t *testing.T) {
	for _, raw := range []string{
		"", "watch=true", "watch=1", "watch=false", "follow=true", "follow=1", "a=b&watch=true",
		"watch=false&watch=true", "watch", "watch=", "wat%63h=true", "watch=tr%75e", "watch=true;x=1",
		"x=1;watch=true", "follow=true&watch=0", "resourceVersion=0&allowWatchBookmarks=true&watch=true",
		"labelSelector=a%3Db&watch=1", "watch=true+", "&&watch=1",
	} {
		u := &url.URL{Scheme: "https", Host: "h", Path: "/api/v1/pods", RawQuery: raw}
		q := u.Query()
		want := q.Get("watch") == "true" || q.Get("watch") == "1" || q.Get("follow") == "true"
		if got := isStreaming(&http.Request{URL: u}); got != want {
			t.Errorf("isStreaming(?%s) = %v, want %v", raw, got, want)
		}
	}
	if !isStreaming(&http.Request{URL: &url.URL{Path: "/api/v1/watch/pods"}}) {
		t.Error("a /watch/ path is streaming")
	}
}

func TestAttemptStatesAreNamed(t *testing.T) {
	for _, v := range []Verdict{Deliver, KeepAndTryNext, TryNext, GiveUp} {
		if v.String() == "Unknown" {
			t.Errorf("verdict %d has no name", v)
		}
	}
}
