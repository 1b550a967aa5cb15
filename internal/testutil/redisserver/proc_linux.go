package redisserver

import "syscall"

// sysProcAttr makes the kernel kill redis-server if the test process dies
// without running its cleanups (a panic, a timeout, a SIGKILL), so no server
// outlives the test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
