package podguard

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

const (
	// stopPoll is how often a stop looks for processes that are left or new.
	stopPoll = 20 * time.Millisecond
	// killWait bounds how long killed processes may take to be gone (one in
	// uninterruptible sleep cannot die at once).
	killWait = 5 * time.Second
)

// stopResult says what a stop did.
type stopResult struct {
	termed, killed int
	// remaining are the processes still alive at the end.
	remaining []int
	// denied are processes the guard may not signal, with the error.
	denied map[int]error
	// listErr is why the process table could not be read.
	listErr error
}

func (r stopResult) failed() bool { return len(r.remaining) > 0 || r.listErr != nil }

func (r stopResult) String() string {
	var b strings.Builder
	if r.listErr != nil {
		fmt.Fprintf(&b, "could not list the Pod's processes: %v", r.listErr)
	}
	if len(r.remaining) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if len(r.remaining) == 1 {
			fmt.Fprintf(&b, "1 process could not be stopped (PID %d)", r.remaining[0])
		} else {
			fmt.Fprintf(&b, "%d processes could not be stopped (PIDs %s)", len(r.remaining), pidList(r.remaining))
		}
	}
	var eperm bool
	for _, err := range r.denied {
		eperm = eperm || errors.Is(err, syscall.EPERM)
	}
	if eperm {
		b.WriteString(": the guard may not signal them; run the guard container as the workload's user or give it the KILL capability")
	}
	return b.String()
}

func pidList(pids []int) string {
	var s []string
	for i, p := range pids {
		if i == 10 {
			s = append(s, "...")
			break
		}
		s = append(s, fmt.Sprint(p))
	}
	return strings.Join(s, ", ")
}

// stopWorkload sends SIGTERM at termAt to every workload process (and to any
// that appears later), SIGKILL at killAt to every one left, and waits up to
// killWait for them to be gone. When killAt is not after termAt it sends only
// SIGKILL. It returns as soon as no workload process is left.
func stopWorkload(clk clock.Clock, ps processes, termAt, killAt time.Time) stopResult {
	res := stopResult{denied: map[int]error{}}
	signalled := map[int]bool{}
	for killAt.After(termAt) && clk.Now().Before(killAt) {
		pids, err := ps.workload()
		if err != nil {
			res.listErr = err
			break
		}
		if len(pids) == 0 {
			return res
		}
		for _, pid := range pids {
			if signalled[pid] {
				continue
			}
			signalled[pid] = true
			if err := ps.signal(pid, syscall.SIGTERM); err != nil {
				res.denied[pid] = err
			} else {
				res.termed++
			}
		}
		clk.Sleep(min(stopPoll, killAt.Sub(clk.Now())))
	}

	killed := map[int]bool{}
	giveUp := clk.Now().Add(killWait)
	for {
		pids, err := ps.workload()
		if err != nil {
			res.listErr = err
			return res
		}
		res.listErr = nil
		if len(pids) == 0 {
			return res
		}
		if clk.Now().After(giveUp) {
			slices.Sort(pids)
			res.remaining = pids
			return res
		}
		for _, pid := range pids {
			if err := ps.signal(pid, syscall.SIGKILL); err != nil {
				res.denied[pid] = err
			} else if !killed[pid] {
				killed[pid] = true
				res.killed++
			}
		}
		clk.Sleep(stopPoll)
	}
}
