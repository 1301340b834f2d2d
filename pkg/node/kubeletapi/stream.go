package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

// streamCreationTimeout is how long a client has to open its streams after
// the upgrade, as the kubelet's.
const streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout

// exec serves /exec/{namespace}/{pod}[/{uid}]/{container}?command=…: the
// command runs inside the container, with a terminal when asked (tty=1).
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	cmd := r.URL.Query()["command"]
	c, opts, ok := s.streamTarget(w, r, func(*remotecommand.Options) error {
		if len(cmd) == 0 {
			return errors.New("no command given")
		}
		return nil
	})
	if ok {
		remotecommand.ServeExec(w, r, executor{c}, r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"), cmd, opts,
			s.opts.StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

// streamTarget reads an exec or attach request: its stream options, which
// check may refuse, and the running container it names. It answers the
// request itself when it returns false.
func (s *Server) streamTarget(w http.ResponseWriter, r *http.Request, check func(*remotecommand.Options) error) (*Container, *remotecommand.Options, bool) {
	opts, err := remotecommand.NewOptions(r)
	if err == nil {
		err = check(opts)
	}
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return nil, nil, false
	}
	c, err := s.running(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"))
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return nil, nil, false
	}
	served()
	return c, opts, true
}

// running returns the container if it runs now.
func (s *Server) running(ns, pod, uid, name string) (*Container, error) {
	c, err := s.host.Container(ns, pod, uid, name)
	if err != nil {
		return nil, err
	}
	if c.Run == nil {
		return nil, fmt.Errorf("container %q in pod %q is not running", name, pod)
	}
	select {
	case <-c.Run.Done():
		return nil, fmt.Errorf("container %q in pod %q is not running", name, pod)
	default:
	}
	return c, nil
}

type executor struct{ c *Container }

// ExecInContainer runs cmd in the container until it exits or the client
// goes; a non-zero exit is reported as the code, as the kubelet does.
func (e executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	command := e.c.Run.Command(cmd, e.c.Env, e.c.Dir, tty)
	err := runStreams(ctx, command, in, out, stderr, tty, resize)
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return utilexec.CodeExitError{Err: err, Code: exitErr.ExitCode()}
	}
	return err
}

// runStreams runs command with the client's streams: plain pipes, or a
// terminal whose other side relays them (and follows resize requests).
// A client that goes away ends the command.
func runStreams(ctx context.Context, command *exec.Cmd, in io.Reader, out, stderr io.Writer, tty bool, resize <-chan remotecommand.TerminalSize) error {
	var copies sync.WaitGroup
	var ptmx *os.File
	if tty {
		var term *os.File
		var err error
		ptmx, term, err = pty.Open()
		if err != nil {
			return fmt.Errorf("opening a terminal: %w", err)
		}
		defer ptmx.Close()
		command.Stdin, command.Stdout, command.Stderr = term, term, term
		if command.SysProcAttr == nil {
			command.SysProcAttr = &syscall.SysProcAttr{}
		}
		// The command leads a session whose controlling terminal is ours,
		// so resizing it sends the command SIGWINCH.
		command.SysProcAttr.Setsid, command.SysProcAttr.Setctty, command.SysProcAttr.Ctty = true, true, 0
		err = command.Start()
		term.Close()
		if err != nil {
			return err
		}
		if in != nil {
			go func() { _, _ = io.Copy(ptmx, in) }()
		}
		if out != nil {
			copies.Add(1)
			go func() {
				defer copies.Done()
				_, _ = io.Copy(out, ptmx) // ends with EIO once the command's side closed
			}()
		}
		go func() {
			for size := range resize {
				_ = pty.Setsize(ptmx, &pty.Winsize{Rows: size.Height, Cols: size.Width})
			}
		}()
	} else {
		if in != nil {
			command.Stdin = in
		}
		command.Stdout, command.Stderr = out, stderr
		if err := command.Start(); err != nil {
			return err
		}
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = command.Process.Kill()
		case <-done:
		}
	}()
	err := command.Wait()
	copies.Wait()
	return err
}

// attach serves /attach/{namespace}/{pod}[/{uid}]/{container}: with -i or
// -t, the run's stdin and terminal through its runtime (runc's monitor);
// without, the output of the current run from now on, from its log.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	pod, name := r.PathValue("pod"), r.PathValue("container")
	c, opts, ok := s.streamTarget(w, r, func(opts *remotecommand.Options) error {
		if !opts.Stdin && !opts.TTY {
			return nil
		}
		got, err := s.running(r.PathValue("namespace"), pod, r.PathValue("uid"), name)
		if err != nil {
			return err
		}
		if _, ok := got.Run.(runtime.Attachable); !ok {
			return fmt.Errorf("container %q in pod %q runs as a host process, which has no stdin stream or terminal to attach to; attach without -i/-t to follow its output, or use kubectl exec", name, pod)
		}
		return nil
	})
	if ok {
		remotecommand.ServeAttach(w, r, attacher{c}, pod, r.PathValue("uid"), name, opts, s.opts.StreamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

type attacher struct{ c *Container }

// AttachContainer attaches to the run's stdin and terminal when asked for
// either (in, tty) and the runtime has them; otherwise it follows the
// current run's log from its end until the run ends or the client goes.
func (a attacher) AttachContainer(ctx context.Context, _, _, name string, in io.Reader, out, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if at, ok := a.c.Run.(runtime.Attachable); ok && (in != nil || tty) {
		var outW, errW io.Writer
		if out != nil {
			outW = out
		}
		if stderr != nil {
			errW = stderr
		}
		return at.Attach(ctx, in, outW, errW, resize)
	}
	run := a.c.Run
	none := int64(0)
	if out == nil {
		out = discard{}
	}
	if stderr == nil {
		stderr = discard{}
	}
	running := func() bool {
		select {
		case <-run.Done():
			return false
		default:
			return true
		}
	}
	return logs.ReadLogs(ctx, a.c.LogPath(a.c.Status.RestartCount), name, &logs.LogOptions{Follow: true, TailLines: &none}, runState{running: running}, out, stderr)
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) Close() error                { return nil }

// portForward serves /portForward/{namespace}/{pod}[/{uid}]: each stream
// connects to a port on the pod's loopback address, inside its network
// namespace, as the kubelet's runtimes do.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	ns, pod, uid := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid")
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	netns, err := s.host.PodNetNS(ns, pod, uid)
	if err != nil {
		fail(w, err, http.StatusBadRequest)
		return
	}
	served()
	portforward.ServePortForward(w, r, forwarder{netns}, pod, uid, opts, s.opts.StreamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

type forwarder struct{ netns string }

// PortForward copies between stream and a connection to port.
func (f forwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := DialInNetNS(ctx, f.netns, port)
	if err != nil {
		return fmt.Errorf("connecting to port %d in the pod: %w", port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// DialInNetNS connects to 127.0.0.1:port inside the network namespace at
// netnsPath ("" for the host's). The socket is made on a thread that has
// entered the namespace, and keeps that namespace for its life; the thread
// returns to the agent's namespace, or is discarded if it cannot.
func DialInNetNS(ctx context.Context, netnsPath string, port int32) (net.Conn, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	d := net.Dialer{Timeout: 10 * time.Second}
	if netnsPath == "" {
		return d.DialContext(ctx, "tcp", addr)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer own.Close()
		target, err := os.Open(netnsPath)
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering %s: %w", netnsPath, err)}
			return
		}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		} // else the goroutine ends locked and Go discards the thread
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
