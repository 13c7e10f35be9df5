package job

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestOrphanFinalizersRemovedOnJobDeletion deletes a running Job with each
// propagation policy, with the controller running or restarted afterwards;
// no pod may keep the tracking finalizer.
func TestOrphanFinalizersRemovedOnJobDeletion(t *testing.T) {
	policies := []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground, metav1.DeletePropagationForeground}
	for _, policy := range policies {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/restart=%v", policy, restart), func(t *testing.T) {
				ctx := context.Background()
				ns := framework.CreateNamespace(t)
				c := framework.Client(t)
				run := startController(t, testOptions())
				job := createJob(t, c, builder.MakeJob("del", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(3).Completions(5).Obj())
				framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3})
				framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 1)
				framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 3, Succeeded: 1})
				if restart {
					run.Stop()
				}
				if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
					t.Fatal(err)
				}
				if restart {
					if policy != metav1.DeletePropagationForeground {
						// The Job is gone before the controller comes back.
						waitJobGone(t, c, job)
					}
					startController(t, testOptions())
				}
				// A foreground deletion waits for the pods, which wait for
				// the controller to remove their finalizers.
				waitJobGone(t, c, job)
				waitNoFinalizerInNamespace(t, c, ns)
			})
		}
	}
}

// TestFinishedBySomeoneElse marks a managed Job finished behind the
// controller's back; its pods lose their finalizers.
func TestFinishedBySomeoneElse(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) { testFinishedBySomeoneElse(t, restart) })
	}
}

func testFinishedBySomeoneElse(t *testing.T, restart bool) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	run := startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("other", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(2).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})
	// Stop the controller so the pods stay failed with their finalizer
	// while someone else finishes the Job.
	run.Stop()
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodFailed, 2)
	markFailed := func() {
		framework.WaitFor(t, "marking the job failed", func(ctx context.Context) (bool, error) {
			j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			now := metav1.Now()
			j.Status.Active, j.Status.Ready, j.Status.Terminating, j.Status.Failed = 0, ptrTo[int32](0), ptrTo[int32](0), 2
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
			j.Status.Conditions = append(j.Status.Conditions,
				batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "External", LastTransitionTime: now, LastProbeTime: now},
				batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "External", LastTransitionTime: now, LastProbeTime: now})
			_, err = c.BatchV1().Jobs(ns).UpdateStatus(ctx, j, metav1.UpdateOptions{})
			return err == nil, err
		})
	}
	if restart {
		markFailed()
		startController(t, testOptions())
	} else {
		startController(t, testOptions())
		time.Sleep(100 * time.Millisecond) // let it sync the unfinished Job first
		markFailed()
	}
	waitNoFinalizerInNamespace(t, c, ns)
	got := getJob(t, c, job)
	if got.Status.Failed != 2 || !findCond(got, batchv1.JobFailed) {
		t.Errorf("status changed by the controller: failed %d, conditions %v", got.Status.Failed, conditionSummary(got))
	}
}

// TestForeignManagedByUntouched checks that a Job managed by another
// controller gets no pods, no status and no finalizer removal, while a
// managed one in the same namespace runs.
func TestForeignManagedByUntouched(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	foreign := createJob(t, c, builder.MakeJob("foreign", ns).ManagedBy("example.com/other").Obj())
	unclaimed := createJob(t, c, builder.MakeJob("unclaimed", ns).Obj())
	// A pod of the foreign Job with the finalizer, as its controller made it.
	pod := builder.MakePod("foreign-pod", ns).OwnedByJob(foreign).Finalizer(batchv1.JobTrackingFinalizer).Obj()
	pod.Labels = foreign.Spec.Template.Labels
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.SetJobPodsPhase(ctx, t, c, foreign, corev1.PodSucceeded, 1)
	managed := createJob(t, c, builder.MakeJob("mine", ns).ManagedBy(jobcontroller.DefaultManagedBy).Obj())
	framework.SetJobPodsPhase(ctx, t, c, framework.WaitForJobPodsStatus(t, c, managed, framework.PodsStatus{Active: 1}), corev1.PodSucceeded, 1)
	framework.WaitForJobCondition(t, c, managed, batchv1.JobComplete)
	time.Sleep(500 * time.Millisecond) // give a wrong controller time to act
	for _, j := range []*batchv1.Job{foreign, unclaimed} {
		got := getJob(t, c, j)
		if got.Status.StartTime != nil || got.Status.Ready != nil || len(got.Status.Conditions) != 0 {
			t.Errorf("Job %s: status written: %+v", j.Name, got.Status)
		}
		if pods, _ := framework.JobPods(ctx, c, j); j == unclaimed && len(pods) != 0 {
			t.Errorf("Job %s: %d pods created", j.Name, len(pods))
		}
	}
	if n, err := podsWithFinalizer(ctx, c, ns); err != nil || n != 1 {
		t.Errorf("%d pods hold the finalizer (err %v), want 1 (the foreign Job's)", n, err)
	}
}

// TestAdoptionAndRelease: an orphan pod matching the selector is adopted
// (gaining the finalizer); a pod whose labels stop matching is released
// (losing it).
func TestAdoptionAndRelease(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	startController(t, testOptions())
	job := createJob(t, c, builder.MakeJob("adopt", ns).ManagedBy(jobcontroller.DefaultManagedBy).Parallelism(2).Completions(3).Obj())
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})

	// Release: change the labels of one pod.
	pods := activePods(t, c, job)
	p := pods[0].DeepCopy()
	p.Labels = map[string]string{"released": "yes"}
	if _, err := c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "pod released", func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return metav1.GetControllerOf(got) == nil && !hasFinalizer(got), nil
	})
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2})

	// Adoption: a succeeded orphan pod whose labels start matching.
	completeAfterAdoption(t, c, job, succeededOrphan(t, c, ns, job.Spec.Template.Labels))
}

// succeededOrphan creates the pod "orphan" in ns without an owner, sets it
// Succeeded, and only then gives it labels (which a Job's selector
// matches). Created with them, it would be Pending, so active, when the
// Job adopts it: with the Job's own pods that is one active pod too many,
// and the Job deletes the newest, the orphan, whenever its pods were
// created in an earlier second (the creation timestamp's resolution), as
// upstream's controller does.
func succeededOrphan(t *testing.T, c kubernetes.Interface, ns string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	orphan := builder.MakePod("orphan", ns).Label("not", "yet").Obj()
	created, err := c.CoreV1().Pods(ns).Create(ctx, orphan, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.SetPodPhase(ctx, c, created, corev1.PodSucceeded); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "orphan relabelled", func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got.Labels = labels
		_, err = c.CoreV1().Pods(ns).Update(ctx, got, metav1.UpdateOptions{})
		return err == nil, err
	})
	return created
}

// completeAfterAdoption waits until job, with two pods running, adopts
// the succeeded pod orphan and counts it, then lets its two pods succeed and
// checks that it completes with three succeeded and no pod in its
// namespace keeps the tracking finalizer.
func completeAfterAdoption(t *testing.T, c kubernetes.Interface, job *batchv1.Job, orphan *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	framework.WaitFor(t, "orphan adopted", func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(orphan.Namespace).Get(ctx, orphan.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(got)
		return ref != nil && ref.UID == job.UID, nil
	})
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: 2, Succeeded: 1})
	framework.SetJobPodsPhase(ctx, t, c, job, corev1.PodSucceeded, 2)
	framework.WaitForJobCondition(t, c, job, batchv1.JobComplete)
	framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Succeeded: 3})
	waitNoFinalizerInNamespace(t, c, orphan.Namespace)
}

func hasFinalizer(p *corev1.Pod) bool {
	for _, f := range p.Finalizers {
		if f == batchv1.JobTrackingFinalizer {
			return true
		}
	}
	return false
}

// waitJobGone waits until the Job is deleted (the garbage collector
// finishes foreground deletions).
func waitJobGone(t testing.TB, c kubernetes.Interface, job *batchv1.Job) {
	t.Helper()
	framework.WaitFor(t, "job "+job.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		return true, nil
	})
}
