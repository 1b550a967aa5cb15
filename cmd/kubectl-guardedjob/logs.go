package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/guardedjob/guardedjob/api/v1alpha1"
)

// logsOptions are the flags of logs.
type logsOptions struct {
	job       string
	container string
	follow    bool
	tail      int64
}

func newLogsCommand(o *options) *cobra.Command {
	lo := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME [--job JOB] [-c CONTAINER] [-f] [--tail N]",
		Short: "Print the logs of a GuardedJob's latest run (its Job's Pods), or of the run whose Job --job names",
		Long: `Print the logs of the Pods of a GuardedJob's latest run: the newest active run's Job,
or else the Job of the last run that had one (status.recentRuns, as kubectl guardedjob
history lists them). --job picks another run's Job. Every line is prefixed with its Pod
and container. Needs get on the GuardedJob, list on Jobs and Pods, and get on pods/log.`,
		Example: `  kubectl guardedjob logs daily-settlement -n payments
  kubectl guardedjob logs daily-settlement -n payments --job daily-settlement-29412005-a1b2c3 -f`,
		Args:              oneName,
		ValidArgsFunction: o.completeNames,
	}
	cmd.Flags().StringVar(&lo.job, "job", "", "the Job of the run to show (default: the latest run's)")
	cmd.Flags().StringVarP(&lo.container, "container", "c", "", "only this container (default: every container and init container)")
	cmd.Flags().BoolVarP(&lo.follow, "follow", "f", false, "stream the logs until the Pods end")
	cmd.Flags().Int64Var(&lo.tail, "tail", -1, "lines from the end of each container's log (default: all)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return logsCmd(cmd.Context(), o, args[0], lo)
	}
	return cmd
}

// latestRunJob is the Job of the newest run that has one: an active run's, or
// the most recent recorded outcome's.
func latestRunJob(gj *batchv1alpha1.GuardedJob) string {
	active := append([]batchv1alpha1.ActiveRun(nil), gj.Status.Active...)
	sort.SliceStable(active, func(i, j int) bool { return active[j].ScheduledTime.Before(&active[i].ScheduledTime) })
	for _, a := range active {
		if a.JobUID != "" {
			return a.JobName
		}
	}
	for _, r := range gj.Status.RecentRuns {
		if r.JobName != "" {
			return r.JobName
		}
	}
	if lr := gj.Status.LastRun; lr != nil {
		return lr.JobName
	}
	return ""
}

func logsCmd(ctx context.Context, o *options, name string, lo *logsOptions) error {
	gj, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	jobName := lo.job
	if jobName == "" {
		if jobName = latestRunJob(gj); jobName == "" {
			return fmt.Errorf("guardedjob %s/%s has no run with a Job yet (kubectl guardedjob history %s shows its runs)", gj.Namespace, gj.Name, gj.Name)
		}
	}
	job := &batchv1.Job{}
	if err := o.k8s.Get(ctx, client.ObjectKey{Namespace: gj.Namespace, Name: jobName}, job); err != nil {
		return fmt.Errorf("job %s of guardedjob %s/%s: %w (the history limits may have removed it)", jobName, gj.Namespace, gj.Name, err)
	}
	if job.Labels[batchv1alpha1.GuardedJobLabel] != gj.Name {
		return fmt.Errorf("job %s is not a run of guardedjob %s/%s", jobName, gj.Namespace, gj.Name)
	}
	pods := &corev1.PodList{}
	if err := o.k8s.List(ctx, pods, client.InNamespace(gj.Namespace), client.MatchingLabels{batchv1.JobNameLabel: jobName}); err != nil {
		return fmt.Errorf("list the Pods of job %s: %w", jobName, err)
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("job %s has no Pods (%s)", jobName, jobState(job))
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp) })
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(o.ErrOut, "job.batch/%s (%s), fence %s: %d Pod(s)\n", jobName, jobState(job), dash(job.Annotations[batchv1alpha1.FenceAnnotation]), len(pods.Items))

	// Each container's log is streamed on its own; lines are written whole.
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			_, _ = fmt.Fprintf(o.ErrOut, "pod %s is not on a node yet (%s): it has no logs\n", p.Name, dash(string(p.Status.Phase)))
			continue
		}
		for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			if lo.container != "" && c.Name != lo.container {
				continue
			}
			opts := &corev1.PodLogOptions{Container: c.Name, Follow: lo.follow}
			if lo.tail >= 0 {
				opts.TailLines = &lo.tail
			}
			prefix := fmt.Sprintf("[%s/%s] ", p.Name, c.Name)
			wg.Go(func() {
				err := streamLog(ctx, cs, p.Namespace, p.Name, opts, func(line string) {
					mu.Lock()
					defer mu.Unlock()
					_, _ = fmt.Fprintln(o.Out, prefix+line)
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("pod %s, container %s: %w", p.Name, c.Name, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// streamLog reads a container's log line by line.
func streamLog(ctx context.Context, cs kubernetes.Interface, ns, pod string, opts *corev1.PodLogOptions, line func(string)) error {
	rc, err := cs.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line(sc.Text())
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
