package crilog

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestStream(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	cases := []struct {
		name   string
		writes []string
		want   []string
		tags   string
	}{
		{"one line", []string{"hello\n"}, []string{"hello"}, "F"},
		{"split across writes", []string{"hel", "lo\nwor", "ld\n"}, []string{"hello", "world"}, "FF"},
		{"no newline at the end", []string{"a\nb"}, []string{"a", "b"}, "FF"},
		{"empty line", []string{"\n"}, []string{""}, "F"},
		{"longer than a record", []string{long + "\n"}, []string{long}, "PF"},
		{"exactly a record", []string{strings.Repeat("y", maxLine) + "\n"}, []string{strings.Repeat("y", maxLine)}, "F"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			f := NewFile(&out)
			f.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
			s := f.Stream("stdout")
			for _, w := range tc.writes {
				if n, err := s.Write([]byte(w)); err != nil || n != len(w) {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			_ = s.Close()
			if got := Lines(out.Bytes()); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("lines %q, want %q", got, tc.want)
			}
			var tags string
			for _, rec := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
				f := strings.SplitN(rec, " ", 4)
				if f[0] != "2026-01-02T03:04:05.000000006Z" || f[1] != "stdout" {
					t.Errorf("record %q", rec[:min(len(rec), 60)])
				}
				tags += f[2]
			}
			if tags != tc.tags {
				t.Errorf("tags %q, want %q", tags, tc.tags)
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	var out bytes.Buffer
	s := NewFile(&out).Stream("stdout")
	line := []byte("GET / HTTP/1.1 200 - a typical access log line of some length\n")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		out.Reset()
		_, _ = s.Write(line)
	}
}

// TestLinesTrailingPartial: what a container wrote last without a newline
// (conmon records it as a partial record at its end) is a line of its own.
func TestLinesTrailingPartial(t *testing.T) {
	log := "2026-11-25T15:36:26.270204982+00:00 stdout F first\n2026-11-25T15:36:26.270204982+00:00 stdout P DO\n2026-11-25T15:36:26.270204983+00:00 stdout P NE\n"
	if got := Lines([]byte(log)); strings.Join(got, "|") != "first|DONE" {
		t.Errorf("lines %q, want first, DONE", got)
	}
}
