package crd_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gjv1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// The fields of issue 32 (suspendNote, failurePolicy, BufferOne/BufferAll with
// bufferLimit, parameters) are validated at apply time, with messages that say
// what to change.
func TestScheduleFieldsAreValidated(t *testing.T) {
	requireAPIServer(t)
	param := func(kv ...any) map[string]any {
		p := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i].(string)] = kv[i+1]
		}
		return p
	}
	params := func(ps ...map[string]any) []any {
		out := make([]any, len(ps))
		for i, p := range ps {
			out[i] = p
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(obj map[string]any)
		want   []string // empty: accepted
	}{
		{name: "a note on a GuardedJob that is not suspended is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{"by": "alice"}, "spec", "suspendNote") },
			want:   []string{"spec.suspendNote", "suspendNote describes a suspension: set suspend to true with it, and remove it when setting suspend to false"}},
		{name: "a note with suspend false is rejected",
			mutate: func(o map[string]any) {
				set(o, false, "spec", "suspend")
				set(o, map[string]any{"reason": "x"}, "spec", "suspendNote")
			},
			want: []string{"spec.suspendNote", "suspendNote describes a suspension"}},
		{name: "a note with who, why and until is accepted on a suspended GuardedJob",
			mutate: func(o map[string]any) {
				set(o, true, "spec", "suspend")
				set(o, map[string]any{"by": "alice", "reason": "ledger migration", "until": "2026-12-01T06:00:00Z"}, "spec", "suspendNote")
			}},
		{name: "a note's reason over 512 characters is rejected",
			mutate: func(o map[string]any) {
				set(o, true, "spec", "suspend")
				set(o, map[string]any{"reason": strings.Repeat("r", 513)}, "spec", "suspendNote")
			},
			want: []string{"spec.suspendNote.reason", "may not be more than 512 bytes"}},
		{name: "an until that is not a time is rejected",
			mutate: func(o map[string]any) {
				set(o, true, "spec", "suspend")
				set(o, map[string]any{"until": "tomorrow"}, "spec", "suspendNote")
			},
			want: []string{"spec.suspendNote.until"}},
		{name: "a failure policy of 0 failures is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{"suspendAfter": int64(0)}, "spec", "failurePolicy") },
			want:   []string{"spec.failurePolicy.suspendAfter", "greater than or equal to 1"}},
		{name: "a failure policy without suspendAfter is rejected",
			mutate: func(o map[string]any) { set(o, map[string]any{}, "spec", "failurePolicy") },
			want:   []string{"spec.failurePolicy.suspendAfter: Required value"}},
		{name: "failurePolicy.alsoCount names the causes it may count",
			mutate: func(o map[string]any) {
				set(o, map[string]any{"suspendAfter": int64(3), "alsoCount": []any{"PodStartTimeout", "JobRejected"}}, "spec", "failurePolicy")
			}},
		{name: "failurePolicy.alsoCount refuses a replaced run (never a failure of the workload)",
			mutate: func(o map[string]any) {
				set(o, map[string]any{"suspendAfter": int64(3), "alsoCount": []any{"JobStopped"}}, "spec", "failurePolicy")
			},
			want: []string{"spec.failurePolicy.alsoCount[0]", `supported values: "PodStartTimeout", "JobRejected"`}},
		{name: "a failure policy of 100 failures is accepted",
			mutate: func(o map[string]any) { set(o, map[string]any{"suspendAfter": int64(100)}, "spec", "failurePolicy") }},
		{name: "BufferOne is accepted", mutate: func(o map[string]any) { set(o, "BufferOne", "spec", "concurrencyPolicy") }},
		{name: "BufferAll with the largest bufferLimit is accepted",
			mutate: func(o map[string]any) {
				set(o, "BufferAll", "spec", "concurrencyPolicy")
				set(o, int64(100), "spec", "bufferLimit")
			}},
		{name: "a bufferLimit with BufferOne is rejected",
			mutate: func(o map[string]any) {
				set(o, "BufferOne", "spec", "concurrencyPolicy")
				set(o, int64(2), "spec", "bufferLimit")
			},
			want: []string{"spec.bufferLimit", "bufferLimit applies only to concurrencyPolicy BufferAll (BufferOne keeps one run waiting)"}},
		{name: "a bufferLimit with the default policy is rejected",
			mutate: func(o map[string]any) { set(o, int64(2), "spec", "bufferLimit") },
			want:   []string{"spec.bufferLimit", "bufferLimit applies only to concurrencyPolicy BufferAll"}},
		{name: "a bufferLimit over 100 is rejected",
			mutate: func(o map[string]any) {
				set(o, "BufferAll", "spec", "concurrencyPolicy")
				set(o, int64(101), "spec", "bufferLimit")
			},
			want: []string{"spec.bufferLimit", "less than or equal to 100"}},
		{name: "parameters with an enum, a pattern and a free one are accepted",
			mutate: func(o map[string]any) {
				set(o, params(
					param("name", "REGION", "enum", []any{"eu-west-1", "us-east-1"}, "default", "eu-west-1", "description", "where to settle"),
					param("name", "DRY_RUN", "pattern", "true|false", "default", "true"),
					param("name", "note"),
				), "spec", "parameters")
			}},
		{name: "a parameter name that is no environment variable name is rejected",
			mutate: func(o map[string]any) { set(o, params(param("name", "DRY-RUN")), "spec", "parameters") },
			want:   []string{"spec.parameters[0].name", "parameters[].name must be a C identifier"}},
		{name: "a parameter named as a variable the manager sets is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "GUARDEDJOB_SCHEDULED_TIME")), "spec", "parameters")
			},
			want: []string{"spec.parameters[0].name", "parameters[].name must not start with GUARDEDJOB_"}},
		{name: "a parameter named as the fence variable is rejected",
			mutate: func(o map[string]any) { set(o, params(param("name", "GUARDEDJOB_FENCE")), "spec", "parameters") },
			want:   []string{"spec.parameters", "parameters[].name must differ from fencing.envName (default GUARDEDJOB_FENCE)"}},
		{name: "a parameter named as a custom fence variable is rejected",
			mutate: func(o map[string]any) {
				set(o, "FENCE", "spec", "fencing", "envName")
				set(o, params(param("name", "FENCE")), "spec", "parameters")
			},
			want: []string{"spec.parameters", "must differ from fencing.envName"}},
		{name: "two parameters of one name are rejected",
			mutate: func(o map[string]any) { set(o, params(param("name", "A"), param("name", "A")), "spec", "parameters") },
			want:   []string{"spec.parameters[1]", "Duplicate value"}},
		{name: "a parameter with both a pattern and an enum is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "A", "pattern", "x", "enum", []any{"x"}, "default", "x")), "spec", "parameters")
			},
			want: []string{"spec.parameters[0].enum", "parameters[].pattern and parameters[].enum cannot both be set"}},
		{name: "a default outside the enum is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "A", "enum", []any{"x", "y"}, "default", "z")), "spec", "parameters")
			},
			want: []string{"spec.parameters[0].default", "parameters[].default must be one of parameters[].enum"}},
		{name: "an enum without a default is rejected: scheduled runs would get the empty string",
			mutate: func(o map[string]any) { set(o, params(param("name", "A", "enum", []any{"x"})), "spec", "parameters") },
			want:   []string{"spec.parameters[0].default", "without one, the empty string"}},
		{name: "a default the pattern does not match as a whole is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "A", "pattern", "[0-9]+", "default", "12a")), "spec", "parameters")
			},
			want: []string{"spec.parameters[0].default", "parameters[].default must match parameters[].pattern"}},
		{name: "a pattern that does not compile is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "A", "pattern", "(", "default", "x")), "spec", "parameters")
			},
			want: []string{"spec.parameters[0]", "error parsing regexp: missing closing )"}},
		{name: "more than 16 parameters are rejected",
			mutate: func(o map[string]any) {
				var ps []map[string]any
				for i := range 17 {
					ps = append(ps, param("name", fmt.Sprintf("P%d", i)))
				}
				set(o, params(ps...), "spec", "parameters")
			},
			want: []string{"spec.parameters", "must have at most 16 items"}},
		{name: "a default over 256 characters is rejected",
			mutate: func(o map[string]any) {
				set(o, params(param("name", "A", "default", strings.Repeat("d", 257))), "spec", "parameters")
			},
			want: []string{"spec.parameters[0].default", "may not be more than 256 bytes"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := testContext(t)
			obj := validGuardedJob(fmt.Sprintf("schedule-%d", i))
			tt.mutate(obj)
			err := k8sClient.Create(ctx, &unstructured.Unstructured{Object: obj})
			if len(tt.want) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(HaveOccurred())
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got %v", err)
			t.Logf("rejected: %v", err)
			for _, want := range tt.want {
				g.Expect(err.Error()).To(ContainSubstring(want))
			}
		})
	}
}

// The status of buffered runs, failures in a row, backfills and run
// parameters is accepted as the manager writes it.
func TestScheduleStatusIsAccepted(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)
	gj := &gjv1.GuardedJob{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(validGuardedJob("schedule-status"), gj)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, gj)).To(Succeed())
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	hourAgo := metav1.NewTime(now.Add(-time.Hour))
	params := map[string]string{"REGION": "us-east-1"}
	gj.Status = gjv1.GuardedJobStatus{
		Buffered:            []gjv1.BufferedRun{{ScheduledTime: now, BufferedAt: now, RunNow: "2026-11-30T10:00:00Z", Parameters: params}},
		ConsecutiveFailures: 2,
		Backfill: &gjv1.BackfillStatus{
			Request: "2026-11-30T10:00:00.123Z", From: hourAgo, To: now, Parallelism: 2, State: gjv1.BackfillRunning,
			Total: 5, Succeeded: 1, Skipped: 1, Failed: 1, Remaining: 2,
			Current:           []gjv1.BackfillOccurrence{{ScheduledTime: hourAgo, Attempts: 2, RetryAt: &now}},
			Next:              &now,
			FailedOccurrences: []metav1.Time{hourAgo},
			StartedAt:         now, Message: "running",
		},
		LastBackfillRequest: &gjv1.BackfillRequestRecord{Request: "2026-11-30T10:00:00.123Z", Result: gjv1.BackfillAccepted, HandledAt: now},
		Active: []gjv1.ActiveRun{{JobName: "schedule-status-29123456-5f3a9c", Phase: gjv1.RunPhaseRunning, ScheduledTime: now,
			Backfill: "2026-11-30T10:00:00.123Z", Parameters: params}},
		LastRun: &gjv1.RunRecord{JobName: "schedule-status-29123450-abcdef", Result: gjv1.RunResultFailed, Parameters: params, Backfill: "x"},
	}
	want := gj.Status.DeepCopy()
	g.Expect(k8sClient.Status().Update(ctx, gj)).To(Succeed())
	var stored gjv1.GuardedJob
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(gj), &stored)).To(Succeed())
	g.Expect(stored.Status.Buffered).To(Equal(want.Buffered))
	g.Expect(stored.Status.Backfill).To(Equal(want.Backfill))
	g.Expect(stored.Status.LastBackfillRequest).To(Equal(want.LastBackfillRequest))
	g.Expect(stored.Status.Active[0].Parameters).To(Equal(params))
	g.Expect(stored.Status.ConsecutiveFailures).To(Equal(int32(2)))
}

// kubectl get gj shows at a glance whether an object works and how its last run
// ended: READY and LAST RESULT are default columns; -o wide adds the lock.
func TestGetShowsReadinessAndTheLastResult(t *testing.T) {
	requireAPIServer(t)
	g := NewWithT(t)
	ctx := testContext(t)
	obj := validGuardedJob("at-a-glance")
	u := &unstructured.Unstructured{Object: obj}
	g.Expect(k8sClient.Create(ctx, u)).To(Succeed())
	set(u.Object, map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "KeyNotAllowed", "message": "m", "lastTransitionTime": "2026-12-01T00:00:00Z"}},
		"lastRun":    map[string]any{"jobName": "at-a-glance-1", "result": "Failed", "scheduledTime": "2026-12-01T00:00:00Z"},
		"lock":       map[string]any{"state": "Free"},
	}, "status")
	g.Expect(k8sClient.Status().Update(ctx, u)).To(Succeed())
	g.Expect(table(t, "at-a-glance")).To(And(
		HaveKeyWithValue("Ready", "False"),
		HaveKeyWithValue("Last Result", "Failed"),
		HaveKeyWithValue("Lock", "Free")))
}
