// Package crilog writes container output in the CRI log format the kubelet
// reads ("<RFC3339Nano time> <stream> <F|P> <line>"), so that upstream's
// reader serves kubectl logs with timestamps, tail, since and follow.
package crilog

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// maxLine is the longest line written whole; longer ones are split into
// partial ("P") records, as containerd does at 16 KiB.
const maxLine = 16 << 10

// File is a log file shared by a container's streams.
type File struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// NewFile returns a log file writing records to w.
func NewFile(w io.Writer) *File { return &File{w: w, now: time.Now} }

// Stream returns a writer for one stream ("stdout" or "stderr"). Close it
// to write a last line that has no newline.
func (f *File) Stream(name string) *Stream { return &Stream{f: f, name: name} }

// Stream turns one stream's bytes into records.
type Stream struct {
	f    *File
	name string
	buf  []byte
}

// Write records every complete line of p, keeping the rest for later.
func (s *Stream) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		if i := bytes.IndexByte(s.buf, '\n'); i >= 0 && i <= maxLine {
			if err := s.f.record(s.name, "F", s.buf[:i]); err != nil {
				return 0, err
			}
			s.buf = s.buf[i+1:]
			continue
		}
		if len(s.buf) > maxLine {
			if err := s.f.record(s.name, "P", s.buf[:maxLine]); err != nil {
				return 0, err
			}
			s.buf = s.buf[maxLine:]
			continue
		}
		break
	}
	if len(s.buf) == 0 {
		s.buf = nil
	}
	return len(p), nil
}

// Close writes what is left as a last, complete line.
func (s *Stream) Close() error {
	if len(s.buf) == 0 {
		return nil
	}
	err := s.f.record(s.name, "F", s.buf)
	s.buf = nil
	return err
}

func (f *File) record(stream, tag string, line []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := make([]byte, 0, len(line)+48)
	rec = f.now().UTC().AppendFormat(rec, time.RFC3339Nano)
	rec = append(rec, ' ')
	rec = append(rec, stream...)
	rec = append(rec, ' ')
	rec = append(rec, tag...)
	rec = append(rec, ' ')
	rec = append(rec, line...)
	rec = append(rec, '\n')
	_, err := f.w.Write(rec)
	return err
}

// Copy copies r into stream name of f until r ends, then closes the stream.
func Copy(f *File, name string, r io.Reader) {
	s := f.Stream(name)
	_, _ = io.Copy(s, r)
	_ = s.Close()
}

// Lines returns the content of the records in log, in order, partial
// records joined to their line: what the container wrote, without times.
// Output that ended without a newline (a last partial record, as a
// container's "echo -n DONE" leaves it) is the last line.
func Lines(log []byte) []string {
	var lines []string
	var partial []byte
	for _, rec := range bytes.Split(log, []byte("\n")) {
		f := bytes.SplitN(rec, []byte(" "), 4)
		if len(f) < 4 {
			continue
		}
		partial = append(partial, f[3]...)
		if string(f[2]) == "F" {
			lines = append(lines, string(partial))
			partial = nil
		}
	}
	if len(partial) > 0 {
		lines = append(lines, string(partial))
	}
	return lines
}
