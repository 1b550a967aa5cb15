// Package testproc runs the servers that tests and benchmarks start as processes
// of their own (control-plane binaries, redis-server, the manager): each is
// started with its output in a log file, signalled and stopped only through its
// own PID, and killed by the kernel if the starting process dies first.
package testproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is one started process.
type Proc struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
}

// Start starts bin with its output appended to logPath.
func Start(name, logPath, bin string, args ...string) (*Proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process' ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig unless the process has exited (its PID may be reused then).
func (p *Proc) Signal(sig syscall.Signal) {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop sends SIGTERM (after SIGCONT, in case it was paused), waits up to grace,
// then SIGKILL, and returns once the process is gone.
func (p *Proc) Stop(grace time.Duration) {
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	p.Kill()
}

// Kill sends SIGKILL and returns once the process is gone.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n lines of the process' log.
func (p *Proc) Tail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns the last n lines of the file at path.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
