package job

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// manualJob returns a Job with manualSelector: true selecting app=<app>:
// its pods carry no batch.kubernetes.io/controller-uid label, so the
// controller's pod informer (Job label only) does not hold them and its
// narrow informer for the Job must.
func manualJob(name, ns, app string) *batchv1.Job {
	job := builder.MakeJob(name, ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(3).Obj()
	job.Spec.ManualSelector = ptr.To(true)
	job.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	job.Spec.Template.Labels = map[string]string{"app": app}
	return job
}

// TestManualSelector: a Job with manualSelector runs to completion with
// exact counts, its pods without the Job label; a succeeded orphan whose
// labels start matching its selector is adopted and counted; no pod keeps
// the finalizer.
func TestManualSelector(t *testing.T) {
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, manualJob("manual", ns, "manual-sel"))
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	for _, p := range activePods(t, c, job) {
		if _, ok := p.Labels[batchv1.ControllerUidLabel]; ok {
			t.Fatalf("pod %s carries %s: the test needs pods without it", p.Name, batchv1.ControllerUidLabel)
		}
		if !hasFinalizer(&p) {
			t.Errorf("pod %s lacks the tracking finalizer", p.Name)
		}
	}

	completeAfterAdoption(t, c, job, succeededOrphan(t, c, ns, map[string]string{"app": "manual-sel"}))
}

// TestManualSelectorJobDeleted: the pods of a Job with manualSelector that
// is deleted while they run (orphan propagation, so they stay) lose the
// tracking finalizer, though no informer of the controller holds them
// once the Job is gone.
func TestManualSelectorJobDeleted(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, manualJob("gone", ns, "gone-sel"))
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	orphan := metav1.DeletePropagationOrphan
	if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	waitJobGone(t, c, job)
	waitNoFinalizerInNamespace(t, c, ns)
}

// TestFinalizerPodOutsideJobLabel: a pod that no Job's label selects,
// created with the tracking finalizer and a controller reference to a Job
// that does not exist, loses the finalizer, as upstream's controller,
// which watches every pod, removes it.
func TestFinalizerPodOutsideJobLabel(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	ghost := builder.MakeJob("ghost", ns).Selector("00000000-0000-0000-0000-00000000beef").Obj()
	pod := builder.MakePod("stray", ns).OwnedByJob(ghost).Finalizer(batchv1.JobTrackingFinalizer).Obj()
	pod.Labels = map[string]string{"app": "stray"}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNoFinalizerInNamespace(t, c, ns)
}
