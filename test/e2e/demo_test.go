/*
Copyright 2026 The GuardedJob Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a command's stdout
// and stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack", "demo.sh")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

// run runs a script of the repository with a deadline. On the deadline the script
// gets SIGTERM, so that it stops what it started, and is killed 30 s later.
func run(ctx context.Context, t *testing.T, root string, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, name), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out syncBuffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("%s %s: no result within %s", name, strings.Join(args, " "), timeout)
	}
	return out.String(), err
}

// TestDemoOneShot runs `make demo` non-interactively (DEMO_ONESHOT=1): it must reach a
// first run that succeeded, showing the lease holder and the fence, and stop everything.
func TestDemoOneShot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole local cluster; skipped with -short")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	env := []string{"DEMO_ONESHOT=1", "DEMO_DIR=" + dir}

	// Safety net: whatever happened, stop what the demo may have left (a no-op when it
	// stopped everything itself). Registered after TempDir, so it runs before the
	// directory with the PID files is removed.
	t.Cleanup(func() {
		out, err := run(context.Background(), t, root, 2*time.Minute, env, "hack/demo.sh", "down")
		if err != nil {
			t.Errorf("hack/demo.sh down: %v\n%s", err, out)
		}
	})

	// Building the control plane takes minutes on a fresh machine (seconds once
	// cached); it is not part of the demo's time budget.
	if out, err := run(t.Context(), t, root, 20*time.Minute, nil, "hack/build-control-plane.sh", "--demo"); err != nil {
		t.Fatalf("hack/build-control-plane.sh --demo: %v\n%s", err, out)
	}

	start := time.Now()
	out, err := run(t.Context(), t, root, 5*time.Minute, env, "hack/demo.sh", "up")
	t.Logf("hack/demo.sh up took %s; output:\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("DEMO_ONESHOT=1 hack/demo.sh up: %v", err)
	}

	// The summary line names the holder (<cluster>/<namespace>/<job>) and the fence.
	summary := regexp.MustCompile(`Run (demo-settlement-\d+-[0-9a-f]{6}) succeeded: holder=demo/default/(demo-settlement-\d+-[0-9a-f]{6}) fence=([1-9]\d*)`)
	m := summary.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no line %q in the output", summary)
	}
	job, holderJob, fence := m[1], m[2], m[3]
	if holderJob != job {
		t.Errorf("holder names Job %s, the run was %s", holderJob, job)
	}
	q := regexp.QuoteMeta
	for _, want := range []string{
		// kubectl get gj while the lease was held: CronJob's columns with
		// readiness and the last result (none yet), and the one active run.
		`NAME\s+SCHEDULE\s+SUSPEND\s+ACTIVE\s+READY\s+LAST RESULT\s+LAST SCHEDULE\s+AGE\n` + `demo-settlement\s+\* \* \* \* \*\s+false\s+1\s+True\s+(\S+\s+)?\S+\s+\S+\n`,
		// kubectl get gj -o wide: the Holder and Fence columns beside Lock.
		`Held\s+demo/default/` + q(job) + `\s+` + fence + `\s`,
		// kubectl get jobs: the Job went to Complete.
		q(job) + `\s+Complete\s+1/1`,
		// redis-cli GET of the key while held: the lease value starts with the holder.
		`GET default:demo-settlement -> demo/default/` + q(job) + `#[0-9a-f]+`,
		// kubectl guardedjob history: the run that succeeded, started by the run-now.
		`SCHEDULED\s+RESULT\s+TRIGGER\s+JOB\s+FENCE\s+ENDED\s+WHY\n(.*\n)*\S+\s+Succeeded\s+(run-now|schedule)\s+` + q(job) + `\s+` + fence + `\s`,
		// kubectl get guardedjobruns -o wide: the run-now request and what became of it.
		`NAME\s+GUARDEDJOB\s+PHASE\s+RESULT\s+JOB\s+FENCE\s+SCHEDULED\s+MESSAGE\s+AGE\n` + `demo-settlement-[a-z0-9]{5}\s+demo-settlement\s+(Running|Finished)\s`,
		// The fence reached the Pod.
		`GUARDEDJOB_FENCE=` + fence + `\s`,
		// kubectl describe gj after the run.
		`Last Run:(\n .*)*\n\s+Result:\s+Succeeded`,
		`DEMO_ONESHOT: the first run succeeded`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output does not match %q", want)
		}
	}
}
