// Command kubectl-guardedjob is a kubectl plugin for GuardedJobs: trigger a run,
// suspend and resume, and see what the lock store says right now.
//
//	go install github.com/guardedjob/guardedjob/cmd/kubectl-guardedjob@latest
//	kubectl guardedjob -n payments status daily-settlement
//
// It talks to the API server as kubectl does (k8s.io/cli-runtime: every kubeconfig
// flag, impersonation, client auth plugins) and with the user's own RBAC. It asks
// the manager, through the GuardedJob itself, what the lock store holds and to
// unlock a stale lock (the inspect-now and unlock annotations), so a user who may
// patch a GuardedJob needs no store credentials. With --redis-secret or
// GUARDEDJOB_REDIS_URL it reads Redis directly instead (break-glass, for admins).
// It depends on api/ and internal/, never on controllers/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	// Client auth plugins (OIDC, and the messages for the removed cloud
	// providers), as kubectl has them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

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
	// go-redis would log each failed dial on stderr; the command's error says it once.
	redis.SetLogger(quietRedis{})
	o := newOptions(genericiooptions.IOStreams{In: stdin, Out: stdout, ErrOut: stderr}, getenv)
	root := newRootCommand(o)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var usage usageError
	switch {
	case errors.As(err, &usage):
		_, _ = fmt.Fprintf(stderr, "error: %v\nSee 'kubectl guardedjob --help'.\n", err)
		return 2
	}
	_, _ = fmt.Fprintln(stderr, errorText(err))
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// errorText formats an error as kubectl does: "Error from server (Forbidden): ..."
// for the API server's refusals, "error: ..." for the rest.
func errorText(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Reason != "" && err.Error() == status.Status().Message {
		return fmt.Sprintf("Error from server (%s): %s", status.Status().Reason, err)
	}
	return "error: " + err.Error()
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// usageError is a command line that cannot be run: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitCoder lets a command choose its exit code (run --wait: 1 when the run did
// not succeed).
type exitCoder interface{ ExitCode() int }

func newRootCommand(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-guardedjob",
		Short: "Operate GuardedJobs: trigger runs, suspend, and see and clear their locks",
		Long: `kubectl guardedjob operates GuardedJobs.

status, locks and unlock ask the manager, through the GuardedJob itself, what the lock
store holds now and to delete a stale lock (the batch.guardedjob.dev/inspect-now and
batch.guardedjob.dev/unlock annotations): that needs patch on the GuardedJob (the edit
role), never the store's credentials. A user who may only read sees the last recorded
observation. With --redis-secret or GUARDEDJOB_REDIS_URL they read Redis directly
instead (for admins, break-glass).`,
		Example: `  kubectl guardedjob -n payments status daily-settlement
  kubectl guardedjob run daily-settlement -n payments --wait
  kubectl guardedjob backfill daily-settlement -n payments --from 2026-11-01T00:00:00Z --to 2026-11-30T23:59:59Z --wait
  kubectl guardedjob suspend daily-settlement -n payments --reason "ledger migration" --until 2h
  kubectl guardedjob locks -A -o wide
  kubectl guardedjob unlock daily-settlement -n payments --force`,
		Version:       buildinfo.Resolve(version, commit).String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return usageError{msg: "no command given"}
		},
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl guardedjob"},
	}
	root.SetVersionTemplate("kubectl-guardedjob {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{msg: err.Error()} })
	o.config.AddFlags(root.PersistentFlags())
	registerConfigCompletions(root, o)
	root.AddCommand(
		newRunCommand(o), newSuspendCommand(o, true), newSuspendCommand(o, false), newBackfillCommand(o),
		newStatusCommand(o), newHistoryCommand(o), newLogsCommand(o), newLocksCommand(o), newUnlockCommand(o), newVersionCommand(),
	)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and commit",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "kubectl-guardedjob", buildinfo.Resolve(version, commit))
			return err
		},
	}
}

// noArgs and oneName check positional arguments, as usage errors.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageError{msg: fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())}
		}
		return usageError{msg: fmt.Sprintf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

func oneName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{msg: fmt.Sprintf("usage: %s", cmd.UseLine())}
	}
	return nil
}
