package jobbuild

import (
	batchv1 "k8s.io/api/batch/v1"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
	"github.com/guardedjob/guardedjob/internal/runparams"
)

// addParameters gives the run's Pods the value of every parameter the
// GuardedJob declares (the run-now request's, or the default) as an environment
// variable on every container and init container, replacing a variable of that
// name, and records them all in the Job's and Pod template's annotation
// batch.guardedjob.dev/parameters.
func addParameters(job *batchv1.Job, gj *batchv1alpha1.GuardedJob, run *batchv1alpha1.ActiveRun) {
	values := runparams.Effective(gj.Spec.Parameters, run.Parameters)
	if len(values) == 0 {
		return
	}
	pod := &job.Spec.Template
	for _, p := range gj.Spec.Parameters {
		for i := range pod.Spec.InitContainers {
			setEnv(&pod.Spec.InitContainers[i], p.Name, values[p.Name])
		}
		for i := range pod.Spec.Containers {
			setEnv(&pod.Spec.Containers[i], p.Name, values[p.Name])
		}
	}
	ann := map[string]string{batchv1alpha1.ParametersAnnotation: runparams.Format(values)}
	job.Annotations = mergeMaps(job.Annotations, ann)
	pod.Annotations = mergeMaps(pod.Annotations, ann)
}
