// Package podguard is the pod lease guard: a native sidecar (an init container
// with restartPolicy Always, the manager image's /guard) in a guarded run's
// Pod that ends the Pod's workload when the run's lease is gone, even when the
// Pod is cut off from the control plane. It knows Redis (through lockclient)
// and Linux processes, nothing of the Kubernetes API.
//
// # What it does
//
// Every Settings.Interval it reads the lease key and its remaining life in one
// atomic round trip (lockclient.Client.Confirm) and compares the value's
// SHA-256 with the run's token hash; the Pod never sees the token. On the
// Pod's monotonic clock, counting from when each read was SENT:
//
//   - the key holds the run's token with PTTL p: the lease cannot expire
//     before send + p, so the workload may run until
//     send + p - margin - grace (the stop deadline; it never moves back);
//   - the key holds another token, or no key exists: the lease is lost; the
//     workload gets SIGTERM at once and SIGKILL after grace; exit ExitLost;
//   - the read fails or times out: no new bound; it reads again (every
//     interval, and more often as the deadline nears) and, when the deadline
//     passes, the workload gets SIGTERM, then SIGKILL after grace but no later
//     than margin before the lease could expire; exit ExitDeadline. A lease
//     that is still the run's but that nobody renews reaches the same
//     deadline.
//
// It checks the deadline before anything else whenever it runs: a guard that
// was paused (SIGSTOP, a frozen node) past its deadline stops the workload at
// once, without asking Redis first, and an answer it reads only after its
// deadline does not overrule it.
//
// "The workload" is every process of the Pod's shared process namespace
// (shareProcessNamespace: true) except PID 1 (the pause process), the guard
// and its children. The guard must be allowed to signal them: run it as the
// workload's user, or as root with only the KILL capability. A process it
// could not end makes the exit ExitStopFailed.
//
// # Contract with the manager
//
// Environment (constants Env*; Settings.Environment builds it):
//
//	GUARDEDJOB_GUARD_KEY              the lease key (required)
//	GUARDEDJOB_GUARD_HOLDER           the run's holder, the token without "#random" (required)
//	GUARDEDJOB_GUARD_TOKEN_SHA256     hex SHA-256 of the whole token, TokenSHA256 (required)
//	GUARDEDJOB_GUARD_INTERVAL         read interval, a Go duration (required; ReadInterval)
//	GUARDEDJOB_GUARD_GRACE            the Pod's terminationGracePeriodSeconds as a duration (required)
//	GUARDEDJOB_GUARD_MARGIN           default 2s
//	GUARDEDJOB_GUARD_STORE_DIR        the store Secret's mount, default /var/run/guardedjob/guard-store
//	GUARDEDJOB_GUARD_STATE_DIR        the guard's emptyDir, default /var/run/guardedjob/guard-state
//	GUARDEDJOB_GUARD_TERMINATION_MESSAGE_PATH  default /dev/termination-log
//	GUARDEDJOB_GUARD_LOG_LEVEL        "debug" logs every read
//
// Bad settings exit ExitConfig (2) with every problem listed, before any
// read; they are written to the termination message too.
//
// Files: the store Secret is mounted read-only into the guard container only,
// with the keys of a storeRef Secret (url, username, password, ca.crt,
// tls.crt, tls.key, insecureSkipVerify; StoreConfig), holding a Redis user
// that may only GET, PTTL, MULTI and EXEC on the namespace's keys
// (docs/security.md, "Pod guard credentials"). The state directory is an
// emptyDir mounted into the guard container only: the guard writes "ready"
// after its first confirmation and "stopped" when it stops the workload.
//
// Startup gate: the guard container's startupProbe is exec [BinaryPath,
// ProbeArg] ("/guard probe"), which succeeds once "ready" exists and "stopped"
// does not. The kubelet starts the workload containers only after it passed,
// so the workload never runs before the lease was confirmed from inside the
// Pod. Give the probe periodSeconds 1 and a failureThreshold that covers the
// time Redis may take to answer at start.
//
// Restarts: a guard whose container restarts finds "ready" (the workload may
// be running) and gives its first read until min(interval, 3s) after its
// start to confirm the lease, else stops the workload; one that finds
// "stopped" kills whatever workload runs now and exits with the recorded code
// at once (the kubelet restarts workload containers of restartPolicy
// OnFailure Pods; use restartPolicy Never for guarded runs).
//
// Exit codes: ExitTerminated (0, SIGTERM: the Pod is ending), ExitConfig (2),
// ExitLost (3), ExitDeadline (4), ExitStopFailed (5). The termination message
// says why, naming the key and the holders, never a token or a password:
// "lease K is held by H2, not by this run (H)", "lease K is gone: no key ...",
// "lease K not confirmed for 9.8s (store unreachable: ...); ...", "lease K is
// still held by this run but was not renewed: it could expire in 2.5s ...",
// "lease K not confirmed for 31s (the guard got no answer in time: was its
// process or node paused?); ...".
//
// # Timing rule
//
// After the manager renews the lease, a confirmation lets the workload run
// until the renewal's expiry less margin and grace; the manager's next renewal
// comes renewInterval later. So the guard must read more often than
// ttl - renewInterval - grace - margin (ReadInterval returns half of that, at
// most renewInterval) or it stops healthy runs. Each read is bounded by
// min(interval, 3s).
package podguard
