package runc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/steadyplane/steadyplane/pkg/node/runtime/crilog"
)

func TestParseSyncMessage(t *testing.T) {
	cases := []struct {
		line    string
		pid     int
		errHas  string
		wantErr bool
	}{
		{line: `{"data": 4242}`, pid: 4242},
		{line: `{"data": -1, "message": "exec: \"/no/such\": stat /no/such: no such file or directory\n"}`, wantErr: true, errHas: "/no/such"},
		{line: `{"data": -1}`, wantErr: true, errHas: "runc create failed"},
		{line: `{"data": 0}`, wantErr: true, errHas: "runc create failed"},
		{line: `not json`, wantErr: true, errHas: "conmon's answer"},
		{line: ``, wantErr: true, errHas: "conmon's answer"},
	}
	for _, tc := range cases {
		pid, err := parseSyncMessage(tc.line)
		if pid != tc.pid || (err != nil) != tc.wantErr || err != nil && !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%q: %d %v; want %d, error %v containing %q", tc.line, pid, err, tc.pid, tc.wantErr, tc.errHas)
		}
	}
}

// TestRotateLog: the log is renamed, conmon is told to reopen it through
// its control FIFO, and the oldest rotated files go; with no monitor on the
// FIFO (the run just ended) the rotation still happens.
func TestRotateLog(t *testing.T) {
	dir := t.TempDir()
	logPath, ctl := filepath.Join(dir, "0.log"), filepath.Join(dir, "ctl")
	if err := syscall.Mkfifo(ctl, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(ctl, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 4; i++ {
		if err := os.WriteFile(logPath, []byte("run "+string(rune('a'+i))+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := rotateLog(logPath, ctl, 3, now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 64)
	n, _ := reader.Read(buf)
	if got := string(buf[:n]); got != strings.Repeat(reopenLogsMessage, 4) {
		t.Errorf("conmon was told %q; want four reopen messages", got)
	}
	rotated, err := crilog.Rotated(logPath)
	if err != nil || len(rotated) != 2 {
		t.Fatalf("rotated files %v %v; want the newest 2 (3 with the current)", rotated, err)
	}
	if b, _ := os.ReadFile(rotated[1]); string(b) != "run d\n" {
		t.Errorf("newest rotated file holds %q", b)
	}
	reader.Close()
	if err := os.WriteFile(logPath, []byte("last\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rotateLog(logPath, ctl, 3, now.Add(time.Minute)); err != nil {
		t.Errorf("rotation with no monitor reading: %v", err)
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Errorf("the log was not renamed: %v", err)
	}
}
