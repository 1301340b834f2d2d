package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/steadyplane/steadyplane/pkg/logfile"
)

// Process is one child process of the control plane (etcd or the API server),
// with its output appended to a log file.
type Process struct {
	Name    string
	Binary  string
	Args    []string
	LogPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Start starts the process. Its standard output and error are appended to
// LogPath. It runs in its own process group, so a Ctrl-C in the terminal
// reaches only the parent, which then stops the children in order; and it is
// killed if the parent dies without stopping it.
func (p *Process) Start() error {
	if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o700); err != nil {
		return fmt.Errorf("%s: log directory: %w", p.Name, err)
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: log file: %w", p.Name, err)
	}
	fmt.Fprintf(logFile, "\n==== %s: starting %s %q\n", time.Now().Format(time.RFC3339), p.Binary, p.Args)
	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.err = cmd, exited, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Exited returns a channel closed when the process last started has exited.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Err returns how the process exited (nil for status 0), valid after Exited.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Pid returns the process id, or 0 before Start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process if it is running.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return errors.New(p.Name + " was not started")
	}
	select {
	case <-exited:
		return nil
	default:
	}
	return cmd.Process.Signal(sig)
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It reports whether the process stopped within the grace period.
func (p *Process) Stop(grace time.Duration) bool {
	exited := p.Exited()
	if exited == nil {
		return true
	}
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return true
	case <-t.C:
		_ = p.Signal(syscall.SIGKILL)
		<-exited
		return false
	}
}

// LogTail returns up to the last n lines of the log file, for error messages.
func (p *Process) LogTail(n int) string { return logfile.Tail(p.LogPath, n, 64<<10) }
