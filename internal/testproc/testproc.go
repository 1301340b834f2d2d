// Package testproc answers what tests of process lifecycles ask of Linux.
package testproc

import (
	"fmt"
	"os"
	"strings"
)

// Alive reports whether pid runs: it exists and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
