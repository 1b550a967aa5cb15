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

// Package v1alpha1 contains the GuardedJob API, group batch.guardedjob.dev, version
// v1alpha1.
//
// A GuardedJob runs a Kubernetes Job on a cron schedule, and only while it holds a Redis
// lease: the lease is acquired before the Job is created, renewed while any Pod of the Job
// may still run, and released when the Job has finished. Field defaults are applied both
// by the CRD schema and by the accessors in defaults.go, so objects built in Go (tests)
// behave the same as objects read from the API server.
//
// +kubebuilder:object:generate=true
// +groupName=batch.guardedjob.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the GuardedJob API.
	GroupVersion = schema.GroupVersion{Group: "batch.guardedjob.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &GuardedJob{}, &GuardedJobList{},
		&GuardedJobRun{}, &GuardedJobRunList{}, &GuardedJobBackfill{}, &GuardedJobBackfillList{},
		&GuardedJobInspect{}, &GuardedJobInspectList{}, &GuardedJobUnlock{}, &GuardedJobUnlockList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
