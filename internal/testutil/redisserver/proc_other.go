//go:build !linux

package redisserver

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
