package podguard

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// procfs is the Pod's shared process namespace, seen through /proc.
type procfs struct {
	root string // "/proc"
	self int
}

func newProcfs() *procfs { return &procfs{root: "/proc", self: os.Getpid()} }

// pfKthread marks a kernel thread in /proc/PID/stat's flags.
const pfKthread = 0x00200000

// workload lists the processes the guard stops: every live process of the
// namespace except PID 1 (the Pod's pause process), the guard itself and its
// children. Zombies are already gone.
func (p *procfs) workload() ([]int, error) {
	var pids []int
	err := p.each(func(pid int, st procStat) {
		if pid > 1 && pid != p.self && st.ppid != p.self && st.state != 'Z' && st.state != 'X' && st.flags&pfKthread == 0 {
			pids = append(pids, pid)
		}
	})
	return pids, err
}

// nodeWide reports whether the guard sees kernel threads: then it runs in the
// node's process namespace (hostPID), where "every process but PID 1" is the
// whole node.
func (p *procfs) nodeWide() (bool, error) {
	var kthreads int
	err := p.each(func(_ int, st procStat) {
		if st.flags&pfKthread != 0 {
			kthreads++
		}
	})
	return kthreads > 0, err
}

type procStat struct {
	ppid  int
	state byte
	flags uint64
}

// each calls f for every process that can be read.
func (p *procfs) each(f func(pid int, st procStat)) error {
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := p.stat(pid); ok {
			f(pid, st)
		}
	}
	return nil
}

// stat reads /proc/PID/stat; ok is false once the process is gone.
func (p *procfs) stat(pid int) (procStat, bool) {
	b, err := os.ReadFile(p.root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may
	// hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 7 || len(fields[0]) != 1 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(fields[1]))
	flags, err2 := strconv.ParseUint(string(fields[6]), 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, state: fields[0][0], flags: flags}, true
}

// signal sends sig to pid. A process that is already gone is not an error.
func (p *procfs) signal(pid int, sig syscall.Signal) error {
	err := syscall.Kill(pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
