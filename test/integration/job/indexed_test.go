package job

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestIndexedJob runs an Indexed Job where one index fails once.
func TestIndexedJob(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("idx", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().Parallelism(3).Completions(4).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
	pods := framework.WaitForActivePods(t, c, job, 3)
	for _, p := range pods {
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix || p.Spec.Hostname != "idx-"+ix || p.GenerateName != "idx-"+ix+"-" {
			t.Errorf("pod %s: label %q hostname %q generateName %q for index %q", p.Name, p.Labels[batchv1.JobCompletionIndexAnnotation], p.Spec.Hostname, p.GenerateName, ix)
		}
		env := p.Spec.Containers[0].Env
		if len(env) != 1 || env[0].Name != "JOB_COMPLETION_INDEX" || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef == nil {
			t.Errorf("pod %s: env %+v, want JOB_COMPLETION_INDEX from the downward API", p.Name, env)
		}
	}
	if diff := cmp.Diff([]string{"0", "1", "2"}, sortedIndexes(pods)); diff != "" {
		t.Errorf("active indexes (-want +got):\n%s", diff)
	}
	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	got := framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Succeeded: 1})
	if got.Status.CompletedIndexes != "1" {
		t.Errorf("completedIndexes %q, want \"1\"", got.Status.CompletedIndexes)
	}
	framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodFailed)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Succeeded: 1, Failed: 1})
	pods = framework.WaitForActivePods(t, c, job, 3)
	if diff := cmp.Diff([]string{"0", "2", "3"}, sortedIndexes(pods)); diff != "" {
		t.Errorf("active indexes after the failure (-want +got):\n%s", diff)
	}
	for _, ix := range []int{0, 2, 3} {
		framework.SetIndexPodPhase(ctx, t, c, job, ix, corev1.PodSucceeded)
	}
	got = framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 4, Failed: 1})
	got = getJob(t, c, got)
	if got.Status.CompletedIndexes != "0-3" {
		t.Errorf("completedIndexes %q, want \"0-3\"", got.Status.CompletedIndexes)
	}
	framework.WaitForNoFinalizer(t, c, job)
}

// TestElasticIndexedJob scales an Indexed Job up and down by changing
// completions and parallelism together.
func TestElasticIndexedJob(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("elastic", ns).ManagedBy(jobcontroller.DefaultManagedBy).Indexed().Parallelism(3).Completions(3).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
	framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})

	// Up: 5 completions, 5 parallelism.
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = ptrTo[int32](5), ptrTo[int32](5) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 4, Succeeded: 1})
	if diff := cmp.Diff([]string{"1", "2", "3", "4"}, sortedIndexes(framework.WaitForActivePods(t, c, job, 4))); diff != "" {
		t.Errorf("active indexes after scaling up (-want +got):\n%s", diff)
	}
	framework.SetIndexPodPhase(ctx, t, c, job, 4, corev1.PodSucceeded)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Succeeded: 2})

	// Down: 2 completions; index 4 no longer counts, pods 2 and 3 go away.
	updateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = ptrTo[int32](2), ptrTo[int32](2) })
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 1, Succeeded: 1})
	framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	got := framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 2})
	if got = getJob(t, c, got); got.Status.CompletedIndexes != "0,1" || got.Status.Failed != 0 {
		t.Errorf("completedIndexes %q failed %d, want \"0,1\" and 0", got.Status.CompletedIndexes, got.Status.Failed)
	}
	framework.WaitForNoFinalizer(t, c, job)
}

func sortedIndexes(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Annotations[batchv1.JobCompletionIndexAnnotation])
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
