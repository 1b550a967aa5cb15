package podguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/guardedjob/guardedjob/internal/lockclient"
)

// Main runs the guard binary with args (the command line without the program
// name) and returns its exit code: the guard with no arguments, the startup
// probe with ProbeArg.
func Main(version string, args []string) int {
	switch {
	case len(args) == 1 && args[0] == ProbeArg:
		return probe(os.Getenv, os.Stdout)
	case len(args) == 1 && (args[0] == "--version" || args[0] == "version"):
		fmt.Println(version)
		return 0
	case len(args) > 0:
		fmt.Fprintf(os.Stderr, "usage: guard [%s | --version]; the guard is configured through its environment (%s, ...)\n", ProbeArg, EnvKey)
		return ExitConfig
	}

	level := slog.LevelInfo
	if os.Getenv(EnvLogLevel) == "debug" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	redis.SetLogger(redisLogger{log})
	o := start(log, version)
	if o.Message != "" {
		path := orDefault(os.Getenv(EnvTerminationMessagePath), DefaultTerminationMessagePath)
		if err := writeTerminationMessage(path, o.Message); err != nil {
			log.Error("Cannot write the termination message", "path", path, "err", err)
		}
	}
	return o.Code
}

func start(log *slog.Logger, version string) Outcome {
	s, err := FromEnv(os.Getenv)
	if err != nil {
		return configError(log, fmt.Errorf("bad environment:\n%w", err))
	}
	if os.Getpid() == 1 {
		return configError(log, errors.New("the guard runs as PID 1: the Pod does not share its process namespace; set shareProcessNamespace: true"))
	}
	procs := newProcfs()
	switch nodeWide, err := procs.nodeWide(); {
	case err != nil:
		return configError(log, err)
	case nodeWide:
		return configError(log, errors.New("the guard sees the node's processes (hostPID: true?): it would stop every process of the node; refusing to run"))
	}
	if fi, err := os.Stat(s.StateDir); err != nil || !fi.IsDir() {
		return configError(log, fmt.Errorf("%s: %s is not a directory: mount an emptyDir there, into the guard container only", EnvStateDir, s.StateDir))
	}
	client, err := dial(log, s)
	if err != nil {
		return configError(log, err)
	}
	defer func() { _ = client.Close() }()
	log.Info("Guarding the workload", "version", version, "key", s.Key, "holder", s.Holder, "store", client.Identity(),
		"interval", s.Interval, "grace", s.Grace, "margin", s.Margin)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	g := &guard{s: s, store: client, procs: procs, log: log, clock: clock.RealClock{}}
	return g.run(ctx)
}

// dial makes the store client from the mounted Secret.
func dial(log *slog.Logger, s Settings) (*lockclient.Client, error) {
	data, err := ReadStoreDir(s.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvStoreDir, err)
	}
	cfg, err := StoreConfig(data)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = readTimeout(s.Interval)
	cfg.PoolSize = 2
	client, err := lockclient.Dial(cfg, lockclient.WithIdentity(lockclient.Redact(cfg.URL)))
	if err != nil {
		return nil, fmt.Errorf("the store Secret: %w", err)
	}
	if cfg.InsecureSkipVerify {
		log.Warn("The store Secret turns TLS server verification off (insecureSkipVerify): anyone on the network path can pose as the store and confirm a lost lease; put its CA into ca.crt instead")
	}
	return client, nil
}

func configError(log *slog.Logger, err error) Outcome {
	log.Error("Cannot guard the workload", "err", err)
	return Outcome{Code: ExitConfig, Message: "pod guard: " + err.Error()}
}

// probe is the startup probe: it succeeds once the guard confirmed the lease
// (and has not stopped the workload since).
func probe(getenv func(string) string, out io.Writer) int {
	dir := orDefault(getenv(EnvStateDir), DefaultStateDir)
	switch {
	case exists(filepath.Join(dir, stoppedFile)):
		_, _ = fmt.Fprintln(out, "not ready: the guard stopped the workload")
		return 1
	case !exists(filepath.Join(dir, readyFile)):
		_, _ = fmt.Fprintln(out, "not ready: the lease is not confirmed yet")
		return 1
	}
	return 0
}

// redisLogger sends go-redis' own messages (reconnects) to the debug level:
// the guard reports every failure that matters itself.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}
