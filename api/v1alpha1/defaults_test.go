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

package v1alpha1

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestGuardedJobSpecDefaults(t *testing.T) {
	type want struct {
		timeZone          string
		startingDeadline  time.Duration
		suspended         bool
		concurrencyPolicy ConcurrencyPolicy
		onDelete          DeletePolicy
		successfulLimit   int32
		failedLimit       int32
		podGracePeriod    time.Duration
	}
	defaults := want{
		timeZone:          "UTC",
		startingDeadline:  300 * time.Second,
		suspended:         false,
		concurrencyPolicy: ForbidConcurrent,
		onDelete:          OnDeleteStop,
		successfulLimit:   3,
		failedLimit:       1,
		podGracePeriod:    30 * time.Second,
	}
	withGrace := func(seconds int64) batchv1.JobTemplateSpec {
		return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To(seconds)},
		}}}
	}
	tests := []struct {
		name string
		spec GuardedJobSpec
		want want
	}{
		{
			name: "an empty spec gets every default",
			spec: GuardedJobSpec{},
			want: defaults,
		},
		{
			name: "set fields are returned as they are",
			spec: GuardedJobSpec{
				TimeZone:                   "Asia/Taipei",
				StartingDeadlineSeconds:    ptr.To[int64](60),
				Suspend:                    ptr.To(true),
				ConcurrencyPolicy:          ReplaceConcurrent,
				OnDelete:                   OnDeleteWait,
				SuccessfulJobsHistoryLimit: ptr.To[int32](10),
				FailedJobsHistoryLimit:     ptr.To[int32](5),
				JobTemplate:                withGrace(120),
			},
			want: want{
				timeZone:          "Asia/Taipei",
				startingDeadline:  time.Minute,
				suspended:         true,
				concurrencyPolicy: ReplaceConcurrent,
				onDelete:          OnDeleteWait,
				successfulLimit:   10,
				failedLimit:       5,
				podGracePeriod:    2 * time.Minute,
			},
		},
		{
			name: "zero history limits keep no Jobs and a zero grace period stays zero",
			spec: GuardedJobSpec{
				SuccessfulJobsHistoryLimit: ptr.To[int32](0),
				FailedJobsHistoryLimit:     ptr.To[int32](0),
				Suspend:                    ptr.To(false),
				ConcurrencyPolicy:          AllowConcurrent,
				JobTemplate:                withGrace(0),
			},
			want: func() want {
				w := defaults
				w.successfulLimit, w.failedLimit = 0, 0
				w.concurrencyPolicy = AllowConcurrent
				w.podGracePeriod = 0
				return w
			}(),
		},
		{
			name: "values the schema rejects fall back to the defaults",
			spec: GuardedJobSpec{
				StartingDeadlineSeconds:    ptr.To[int64](0),
				ConcurrencyPolicy:          "Sometimes",
				OnDelete:                   "Never",
				SuccessfulJobsHistoryLimit: ptr.To[int32](-1),
				FailedJobsHistoryLimit:     ptr.To[int32](-2),
			},
			want: defaults,
		},
		{
			name: "a negative grace period counts as one second, as the API server treats it",
			spec: GuardedJobSpec{JobTemplate: withGrace(-5)},
			want: func() want {
				w := defaults
				w.podGracePeriod = time.Second
				return w
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := tt.spec.DeepCopy()
			g.Expect(spec.TimeZoneOrDefault()).To(Equal(tt.want.timeZone))
			g.Expect(spec.StartingDeadline()).To(Equal(tt.want.startingDeadline))
			g.Expect(spec.Suspended()).To(Equal(tt.want.suspended))
			g.Expect(spec.ConcurrencyPolicyOrDefault()).To(Equal(tt.want.concurrencyPolicy))
			g.Expect(spec.OnDeleteOrDefault()).To(Equal(tt.want.onDelete))
			g.Expect(spec.SuccessfulHistoryLimit()).To(Equal(tt.want.successfulLimit))
			g.Expect(spec.FailedHistoryLimit()).To(Equal(tt.want.failedLimit))
			g.Expect(spec.PodGracePeriod()).To(Equal(tt.want.podGracePeriod))
			g.Expect(spec).To(Equal(&tt.spec), "accessors never write defaults into spec")
		})
	}
}

func TestLockSpecDefaults(t *testing.T) {
	type want struct {
		ttl                time.Duration
		renewInterval      time.Duration
		maxHold            time.Duration
		keepAfterSuccess   time.Duration
		occurrenceKey      string
		onBusy             BusyPolicy
		storeFailurePolicy StoreFailurePolicy
	}
	defaults := want{
		ttl:                time.Minute,
		renewInterval:      20 * time.Second,
		maxHold:            24 * time.Hour,
		keepAfterSuccess:   0,
		occurrenceKey:      "{{ .Key }}:done:{{ .ScheduledTime.Unix }}",
		onBusy:             OnBusySkip,
		storeFailurePolicy: FailClosed,
	}
	tests := []struct {
		name string
		lock LockSpec
		want want
	}{
		{
			name: "an empty lock gets every default and renews every third of the default ttl",
			lock: LockSpec{Key: "ns:k"},
			want: defaults,
		},
		{
			name: "set fields are returned as they are",
			lock: LockSpec{
				Key:                "ns:k",
				OccurrenceKey:      `{{ .Key }}:{{ .ScheduledTime.Format "2006-01-02" }}`,
				TTL:                duration(90 * time.Second),
				RenewInterval:      duration(10 * time.Second),
				MaxHold:            duration(6 * time.Hour),
				KeepAfterSuccess:   duration(time.Hour),
				OnBusy:             OnBusyRetry,
				StoreFailurePolicy: FailOpen,
			},
			want: want{
				ttl:                90 * time.Second,
				renewInterval:      10 * time.Second,
				maxHold:            6 * time.Hour,
				keepAfterSuccess:   time.Hour,
				occurrenceKey:      `{{ .Key }}:{{ .ScheduledTime.Format "2006-01-02" }}`,
				onBusy:             OnBusyRetry,
				storeFailurePolicy: FailOpen,
			},
		},
		{
			name: "an unset renewInterval is a third of the ttl that is set",
			lock: LockSpec{Key: "ns:k", TTL: duration(30 * time.Second)},
			want: func() want {
				w := defaults
				w.ttl, w.renewInterval = 30*time.Second, 10*time.Second
				return w
			}(),
		},
		{
			name: "zero and negative durations and unknown enum values fall back to the defaults",
			lock: LockSpec{
				Key:                "ns:k",
				TTL:                duration(0),
				RenewInterval:      duration(-time.Second),
				MaxHold:            duration(0),
				KeepAfterSuccess:   duration(-time.Hour),
				OnBusy:             "Wait",
				StoreFailurePolicy: "FailSometimes",
			},
			want: defaults,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			lock := tt.lock.DeepCopy()
			g.Expect(lock.TTLOrDefault()).To(Equal(tt.want.ttl))
			g.Expect(lock.RenewIntervalOrDefault()).To(Equal(tt.want.renewInterval))
			g.Expect(lock.MaxHoldOrDefault()).To(Equal(tt.want.maxHold))
			g.Expect(lock.KeepAfterSuccessOrDefault()).To(Equal(tt.want.keepAfterSuccess))
			g.Expect(lock.OccurrenceKeyTemplate()).To(Equal(tt.want.occurrenceKey))
			g.Expect(lock.OnBusyOrDefault()).To(Equal(tt.want.onBusy))
			g.Expect(lock.StoreFailurePolicyOrDefault()).To(Equal(tt.want.storeFailurePolicy))
			g.Expect(lock).To(Equal(&tt.lock), "accessors never write defaults into spec")
		})
	}
}

func TestFencingSpecDefaults(t *testing.T) {
	tests := []struct {
		name        string
		fencing     *FencingSpec
		wantPolicy  FencingPolicy
		wantKey     string
		wantEnvName string
	}{
		{
			name:        "a nil fencing spec gets every default",
			fencing:     nil,
			wantPolicy:  FencingInject,
			wantKey:     "{{ .Key }}:fence",
			wantEnvName: "GUARDEDJOB_FENCE",
		},
		{
			name:        "an empty fencing spec gets every default",
			fencing:     &FencingSpec{},
			wantPolicy:  FencingInject,
			wantKey:     "{{ .Key }}:fence",
			wantEnvName: "GUARDEDJOB_FENCE",
		},
		{
			name:        "set fields are returned as they are",
			fencing:     &FencingSpec{Policy: FencingStrict, Key: "payments:fence", EnvName: "FENCE"},
			wantPolicy:  FencingStrict,
			wantKey:     "payments:fence",
			wantEnvName: "FENCE",
		},
		{
			name:        "policy None is kept",
			fencing:     &FencingSpec{Policy: FencingNone},
			wantPolicy:  FencingNone,
			wantKey:     "{{ .Key }}:fence",
			wantEnvName: "GUARDEDJOB_FENCE",
		},
		{
			name:        "an unknown policy falls back to Inject",
			fencing:     &FencingSpec{Policy: "Loose"},
			wantPolicy:  FencingInject,
			wantKey:     "{{ .Key }}:fence",
			wantEnvName: "GUARDEDJOB_FENCE",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.fencing.PolicyOrDefault()).To(Equal(tt.wantPolicy))
			g.Expect(tt.fencing.KeyTemplate()).To(Equal(tt.wantKey))
			g.Expect(tt.fencing.EnvNameOrDefault()).To(Equal(tt.wantEnvName))
		})
	}
}
