package runc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/steadyplane/steadyplane/pkg/node/runtime"
)

var _ runtime.Attachable = (*container)(nil)

// conmon's attach socket (in the bundle): a SOCK_SEQPACKET socket whose
// packets from conmon are one byte naming the stream and the bytes of it;
// what a client sends is the container's stdin, and the client's shutdown
// of its side ends stdin unless the container keeps it open (stdinOnce
// false, --leave-stdin-open). As CRI-O's and Podman's attach.
const (
	attachSocket        = "attach"
	attachStdout        = 2
	attachStderr        = 3
	attachPacket        = 8192 + 1 // conmon's STDIO_BUF_SIZE and the stream byte
	stdinPacket         = 8192     // at most what conmon reads of one packet
	resizeMessageFormat = "1 %d %d\n"
)

// Attach implements runtime.Attachable.
func (c *container) Attach(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, resize <-chan remotecommand.TerminalSize) error {
	if stdin != nil && !c.stdin {
		return errors.New("the container has no stdin stream (its spec does not set stdin: true)")
	}
	conn, err := dialAttach(filepath.Join(c.dir, bundleDir))
	if err != nil {
		return fmt.Errorf("attaching to the container: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.Done():
		}
		// Ends the reads below: the client went, or the run ended (conmon,
		// which closes the socket then, may be slow to).
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	}()
	if c.tty && resize != nil {
		go c.followResizes(ctx, resize)
	}
	if stdin != nil {
		// Ends with the client's input, or at its first write after the
		// attach ended.
		go func() {
			buf := make([]byte, stdinPacket)
			for {
				n, err := stdin.Read(buf)
				if n > 0 {
					if _, werr := conn.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					// The end of the client's input: conmon closes the
					// container's stdin unless it is kept open.
					_ = conn.CloseWrite()
					return
				}
			}
		}()
	}
	buf := make([]byte, attachPacket)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		if n < 1 {
			continue
		}
		out := stdout
		if buf[0] == attachStderr && stderr != nil {
			out = stderr
		}
		if out != nil && (buf[0] == attachStdout || buf[0] == attachStderr) {
			if _, err := out.Write(buf[1:n]); err != nil {
				break
			}
		}
	}
	return nil
}

// dialAttach connects to the attach socket in dir through the directory's
// file descriptor: a socket's path is limited to 108 bytes, a pod's
// directory may be longer.
func dialAttach(dir string) (*net.UnixConn, error) {
	d, err := os.OpenFile(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	addr := &net.UnixAddr{Net: "unixpacket", Name: fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), attachSocket)}
	conn, err := net.DialUnix("unixpacket", nil, addr)
	if errors.Is(err, syscall.ENOENT) {
		return nil, errors.New("the container's monitor has no attach socket (the run has ended)")
	}
	return conn, err
}

// resizeSettle is how long a burst of resizes is gathered into one.
const resizeSettle = 50 * time.Millisecond

// followResizes passes the sizes to conmon, which sets the terminal's. Of
// a burst (kubectl sends its size plus one, then its size, to force a
// redraw) only the last is sent: conmon 2.1.6 handles the first message of
// one read of its control FIFO as many times as the read holds messages.
func (c *container) followResizes(ctx context.Context, resize <-chan remotecommand.TerminalSize) {
	for {
		var size remotecommand.TerminalSize
		select {
		case <-ctx.Done():
			return
		case s, ok := <-resize:
			if !ok {
				return
			}
			size = s
		}
		open := true
		settle := time.NewTimer(resizeSettle)
	burst:
		for open {
			select {
			case s, ok := <-resize:
				if ok {
					size = s
				}
				open = ok
			case <-settle.C:
				break burst
			case <-ctx.Done():
				settle.Stop()
				return
			}
		}
		settle.Stop()
		if err := writeControl(filepath.Join(c.dir, bundleDir, "ctl"), fmt.Sprintf(resizeMessageFormat, size.Height, size.Width)); err != nil || !open {
			return
		}
	}
}

// writeControl writes a message to conmon's control FIFO at ctl, without
// blocking: a monitor that has just ended has no reader on it (ENXIO).
func writeControl(ctl, msg string) error {
	f, err := os.OpenFile(ctl, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(msg)
	return err
}
