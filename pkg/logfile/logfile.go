// Package logfile reads the end of log files, for error messages and
// termination messages.
package logfile

import (
	"bytes"
	"io"
	"os"
)

// Tail returns the last lines of the file at path: at most maxLines lines
// from its last maxBytes bytes. A missing file gives "".
func Tail(path string, maxLines int, maxBytes int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		_, _ = f.Seek(st.Size()-maxBytes, io.SeekStart)
	}
	data, _ := io.ReadAll(io.LimitReader(f, maxBytes))
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
