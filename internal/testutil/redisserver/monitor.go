package redisserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Command is one command the server executed, as MONITOR reports it.
type Command struct {
	At time.Time
	// Addr is the client's address (host:port) as CLIENT LIST names it.
	Addr string
	// Args are the command's name and arguments.
	Args []string
}

// Monitor records every command a server executes (MONITOR, on a connection of
// its own), and the ACL user of each client connection it sees while it runs
// (CLIENT LIST).
type Monitor struct {
	conn net.Conn
	done chan struct{}

	mu    sync.Mutex
	cmds  []Command
	users map[string]string
	stop  chan struct{}
	// readUsers adds the connections CLIENT LIST names now to users.
	readUsers func()
}

var monitorLine = regexp.MustCompile(`^(\d+)\.(\d+) \[\d+ ([^\]]+)\] (.*)$`)

// Monitor starts recording; it stops with [Monitor.Stop] or when the test ends.
// Not for a TLS server.
func (s *Server) Monitor(t testing.TB) *Monitor {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("redisserver: monitor: %v", err)
	}
	rd := bufio.NewReaderSize(conn, 1<<16)
	send := func(args ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			t.Fatalf("redisserver: monitor: %v", err)
		}
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("redisserver: monitor: %v", err)
		}
		return strings.TrimSpace(line)
	}
	if user, pw := s.credentials(); pw != "" {
		args := []string{"AUTH", pw}
		if user != "" {
			args = []string{"AUTH", user, pw}
		}
		if r := send(args...); r != "+OK" {
			t.Fatalf("redisserver: monitor: AUTH: %s", r)
		}
	}
	if r := send("MONITOR"); r != "+OK" {
		t.Fatalf("redisserver: monitor: MONITOR: %s", r)
	}
	m := &Monitor{conn: conn, done: make(chan struct{}), users: map[string]string{}, stop: make(chan struct{})}
	rdb := s.Client(t)
	m.readUsers = func() {
		list, err := rdb.ClientList(context.Background()).Result()
		if err != nil {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, line := range strings.Split(list, "\n") {
			var addr, user string
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "addr="); ok {
					addr = v
				}
				if v, ok := strings.CutPrefix(f, "user="); ok {
					user = v
				}
			}
			if addr != "" {
				m.users[addr] = user
			}
		}
	}
	m.readUsers()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
				m.readUsers()
			}
		}
	}()
	go func() {
		defer close(m.done)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			if c, ok := parseMonitor(strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+")); ok {
				m.mu.Lock()
				m.cmds = append(m.cmds, c)
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(m.Stop)
	return m
}

// Stop ends the recording. It reads CLIENT LIST once more, so that every
// connection still open then has its user, however late it was opened.
func (m *Monitor) Stop() {
	select {
	case <-m.stop:
		return
	default:
		close(m.stop)
	}
	time.Sleep(100 * time.Millisecond) // what the server sent last arrives
	m.readUsers()
	_ = m.conn.Close()
	<-m.done
}

// Commands returns what was recorded so far.
func (m *Monitor) Commands() []Command {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Command(nil), m.cmds...)
}

// User returns the ACL user of the connection at addr ("default" without ACL
// users), or "" when the recording never saw it in CLIENT LIST: a connection
// opened and closed between two reads, such as one of a process that exited.
func (m *Monitor) User(addr string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.users[addr]
}

// Mentioning returns the commands one of whose arguments contains s.
func (m *Monitor) Mentioning(s string) []Command {
	var out []Command
	for _, c := range m.Commands() {
		for _, a := range c.Args {
			if strings.Contains(a, s) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// parseMonitor reads a MONITOR line: `1701234567.123456 [0 127.0.0.1:54321]
// "SET" "key" "value"`.
func parseMonitor(line string) (Command, bool) {
	sm := monitorLine.FindStringSubmatch(line)
	if sm == nil {
		return Command{}, false
	}
	sec, _ := strconv.ParseInt(sm[1], 10, 64)
	usec, _ := strconv.ParseInt(sm[2], 10, 64)
	c := Command{At: time.Unix(sec, usec*1000), Addr: sm[3]}
	for rest := sm[4]; ; {
		rest = strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(rest, `"`) {
			break
		}
		i := 1
		var b strings.Builder
		for i < len(rest) && rest[i] != '"' {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			b.WriteByte(rest[i])
			i++
		}
		c.Args = append(c.Args, b.String())
		rest = rest[min(i+1, len(rest)):]
	}
	return c, true
}
