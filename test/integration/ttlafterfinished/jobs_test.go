package ttlafterfinished

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestTTLZero(t *testing.T) {
	for _, ctype := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		t.Run(string(ctype), func(t *testing.T) {
			e := setup(t)
			job := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(0).Obj())
			pod := e.ownPod(t, job)
			e.finishJob(t, job, ctype, time.Now())
			e.waitJobGone(t, job)
			// Foreground propagation: the garbage collector removed the pod
			// before the Job went away.
			gone, err := e.podGone(e.ctx, pod.Name, pod.UID)
			if err != nil || !gone {
				t.Errorf("pod %s still exists after its Job was deleted (err %v)", pod.Name, err)
			}
		})
	}
}

func TestTTLTenSeconds(t *testing.T) {
	e := setup(t)
	job := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(10).Obj())
	finished := time.Now().Truncate(time.Second) // lastTransitionTime has second precision
	e.finishJob(t, job, batchv1.JobComplete, finished)
	gone := e.waitJobGone(t, job)
	if d := gone.Sub(finished); d < 10*time.Second {
		t.Errorf("Job deleted %v after it finished, want no earlier than 10s", d)
	}
}

func TestNotDeleted(t *testing.T) {
	e := setup(t)
	noTTL := e.createJob(t, builder.MakeJob("no-ttl", e.ns).Obj())
	e.finishJob(t, noTTL, batchv1.JobComplete, time.Now().Add(-time.Hour))
	unfinished := e.createJob(t, builder.MakeJob("unfinished", e.ns).TTLSecondsAfterFinished(0).Obj())
	suspended := e.createJob(t, builder.MakeJob("suspended", e.ns).TTLSecondsAfterFinished(0).Suspend(true).Obj())
	interim := e.createJob(t, builder.MakeJob("interim", e.ns).TTLSecondsAfterFinished(0).Obj())
	e.finishJob(t, interim, batchv1.JobFailureTarget, time.Now().Add(-time.Hour))
	e.sentinel(t)
	for _, j := range []*batchv1.Job{noTTL, unfinished, suspended, interim} {
		if !e.jobExists(t, j) {
			t.Errorf("Job %s was deleted", j.Name)
		}
	}
}

func TestTTLAddedAfterFinish(t *testing.T) {
	e := setup(t)
	job := e.createJob(t, builder.MakeJob("j", e.ns).Obj())
	job = e.finishJob(t, job, batchv1.JobComplete, time.Now())
	e.sentinel(t)
	if !e.jobExists(t, job) {
		t.Fatal("Job without TTL was deleted")
	}
	patch := []byte(`{"spec":{"ttlSecondsAfterFinished":1}}`)
	if _, err := e.client.BatchV1().Jobs(e.ns).Patch(e.ctx, job.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		t.Fatal(err)
	}
	e.waitJobGone(t, job)
}

func TestTTLExtendedBeforeExpiry(t *testing.T) {
	e := setup(t)
	job := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(3).Obj())
	short := e.createJob(t, builder.MakeJob("short", e.ns).TTLSecondsAfterFinished(3).Obj())
	now := time.Now()
	e.finishJob(t, job, batchv1.JobComplete, now)
	e.finishJob(t, short, batchv1.JobComplete, now)
	patch := []byte(`{"spec":{"ttlSecondsAfterFinished":3600}}`)
	if _, err := e.client.BatchV1().Jobs(e.ns).Patch(e.ctx, job.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		t.Fatal(err)
	}
	// The Job that kept the short TTL expires at the same instant the
	// extended one would have.
	e.waitJobGone(t, short)
	e.sentinel(t)
	if !e.jobExists(t, job) {
		t.Error("Job whose TTL was extended before expiry was deleted")
	}
}

func TestRecreatedJobSurvives(t *testing.T) {
	e := setup(t)
	old := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(2).Obj())
	twin := e.createJob(t, builder.MakeJob("twin", e.ns).TTLSecondsAfterFinished(2).Obj())
	now := time.Now()
	e.finishJob(t, old, batchv1.JobComplete, now)
	e.finishJob(t, twin, batchv1.JobComplete, now)
	// Replace it before it expires with an unfinished Job of the same name
	// and a TTL of 0.
	bg := metav1.DeletePropagationBackground
	if err := e.client.BatchV1().Jobs(e.ns).Delete(e.ctx, old.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, "old Job gone", func(ctx context.Context) (bool, error) { return !e.jobExists(t, old), nil })
	fresh := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(0).Obj())
	e.waitJobGone(t, twin) // the old Job's expiry has passed
	e.sentinel(t)
	if !e.jobExists(t, fresh) {
		t.Error("the new Job with the same name was deleted")
	}
}

func TestFinishTimeInFuture(t *testing.T) {
	e := setup(t)
	job := e.createJob(t, builder.MakeJob("j", e.ns).TTLSecondsAfterFinished(0).Obj())
	future := time.Now().Add(5 * time.Second).Truncate(time.Second)
	e.finishJob(t, job, batchv1.JobComplete, future)
	gone := e.waitJobGone(t, job)
	if gone.Before(future) {
		t.Errorf("Job deleted at %v, before its finish time %v", gone, future)
	}
}
