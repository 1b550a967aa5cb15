// Command kubectl-guardedjob is a kubectl plugin for GuardedJobs: trigger a run,
// suspend and resume, and see what the lock store says right now.
//
//	go install github.com/guardedjob/guardedjob/cmd/kubectl-guardedjob@latest
//	kubectl guardedjob status daily-settlement -n payments --redis-secret guardedjob-system/guardedjob-redis
//
// It talks to the API server with the user's own kubeconfig and RBAC, and to Redis
// with credentials from a Secret the user may read (--redis-secret) or from
// GUARDEDJOB_REDIS_URL. It depends on api/ and internal/lockclient only.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/guardedjob/guardedjob/internal/buildinfo"
)

// version and commit are set at build time by make release (-ldflags "-X
// main.version=... -X main.commit=..."); a `go install` build leaves them empty and
// reports its build info instead (internal/buildinfo).
var version, commit string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}

// Main runs one command and returns the exit code: 0 done, 1 failed (or the run
// did not succeed), 2 usage error.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "version" || args[0] == "--version" {
		_, _ = fmt.Fprintln(stdout, "kubectl-guardedjob", buildinfo.Resolve(version, commit))
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		_, _ = fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	o := &options{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	positional, err := o.parse(args[0], args[1:], cmd.flags)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	if len(positional) != cmd.args {
		if cmd.args == 1 {
			_, _ = fmt.Fprintf(stderr, "usage: kubectl guardedjob %s NAME [flags]\n", args[0])
		} else {
			_, _ = fmt.Fprintf(stderr, "usage: kubectl guardedjob %s [flags]\n", args[0])
		}
		return 2
	}
	if err := cmd.run(ctx, o, positional); err != nil {
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		var ec exitCoder
		if asExitCoder(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

const usage = `kubectl guardedjob: operate GuardedJobs.

Commands:
  run NAME [--wait] [--timeout 5m]   run the occurrence due now (the run-now annotation); shows the Job,
                                     and with --wait waits for the run to end
  suspend NAME                       stop scheduling new runs (a running one goes on)
  resume NAME                        schedule again
  status NAME                        the GuardedJob's state, plus what Redis says right now:
                                     holder, expiry, fence and the current occurrence's done-marker
  locks [-A]                         every lock key the GuardedJobs in scope use and who holds it
  unlock NAME --force [--yes]        delete a stale lock or the current occurrence's done-marker,
                                     after confirmation, with an event on the GuardedJob
  version                            the plugin's version and commit

Common flags:
  -n, --namespace NS     namespace (default: the kubeconfig's)
  --kubeconfig PATH      kubeconfig file (default: $KUBECONFIG or ~/.kube/config)
  --context NAME         kubeconfig context

Lock store (status, locks, unlock), one of:
  --redis-secret NS/NAME   the manager's store Secret (key url; optional ca.crt, tls.crt, tls.key,
                           username, password), read with your own RBAC
  GUARDEDJOB_REDIS_URL     the store's URL in the environment
A GuardedJob with spec.lock.storeRef uses that Secret (in its namespace) instead.
  --cluster-name NAME      this cluster's name in lease holders (default: derived from the
                           kube-system namespace UID, as the manager does)
`
