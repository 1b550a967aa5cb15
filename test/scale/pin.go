package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// defaultPinning splits the machine in two: etcd and kube-apiserver on the first
// CPU, everything that talks to them (the floor's writers, kube-controller-manager,
// the manager, Redis, this process) on the others. Each phase then gives the API
// server the same CPU, so what a client costs in CPU does not come out of the
// server's share and the ratios compare the clients' requests alone. A machine
// with one CPU is not split.
func defaultPinning(cpus int) (server, client string) {
	switch {
	case cpus < 2:
		return "", ""
	case cpus == 2:
		return "0", "1"
	default:
		return "0", fmt.Sprintf("1-%d", cpus-1)
	}
}

// pinSelf sets the CPU affinity of every thread of this process (taskset -a);
// threads and processes started later inherit it.
func pinSelf(cpus string) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, fmt.Sprint(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s: %v: %s", cpus, err, strings.TrimSpace(string(out)))
	}
	return nil
}
