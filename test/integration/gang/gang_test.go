// Package gang tests the Job controller's WorkloadWithJob (alpha in
// v1.36) against a real control plane whose apiserver has the gates on
// (GenericWorkload, WorkloadWithJob) and serves scheduling.k8s.io/v1alpha2,
// the cases of upstream's TestJobGangScheduling and
// TestJobAdmissionParallelismUpdate that have the gates on.
package gang

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

func TestMain(m *testing.M) {
	// Before the control plane starts: its apiserver and the controllers
	// read the process's gate set, as under up --feature-gates.
	if err := utilfeature.DefaultMutableFeatureGate.Set("GenericWorkload=true,WorkloadWithJob=true"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	framework.Main(m)
}

// options are the controller's options in these tests.
func options() jobcontroller.Options {
	return jobcontroller.Options{ManageUnclaimedJobs: true, SyncBatchPeriod: 10 * time.Millisecond, PodFailureBackoff: 20 * time.Millisecond}
}

// ownedBy returns the first of objs controlled by the Job uid.
func ownedBy[T any](objs []T, meta func(*T) metav1.Object, uid types.UID) *T {
	for i := range objs {
		if ref := metav1.GetControllerOf(meta(&objs[i])); ref != nil && ref.UID == uid && ref.Kind == "Job" {
			return &objs[i]
		}
	}
	return nil
}

// workloadOf and podGroupOf read the Job's Workload and PodGroup, nil if
// none.
func workloadOf(ctx context.Context, c kubernetes.Interface, job *batchv1.Job) (*schedulingv1alpha2.Workload, error) {
	l, err := c.SchedulingV1alpha2().Workloads(job.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return ownedBy(l.Items, func(w *schedulingv1alpha2.Workload) metav1.Object { return w }, job.UID), nil
}

func podGroupOf(ctx context.Context, c kubernetes.Interface, job *batchv1.Job) (*schedulingv1alpha2.PodGroup, error) {
	l, err := c.SchedulingV1alpha2().PodGroups(job.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return ownedBy(l.Items, func(p *schedulingv1alpha2.PodGroup) metav1.Object { return p }, job.UID), nil
}

// waitForWorkload waits for the Job's Workload and PodGroup.
func waitForGang(t *testing.T, c kubernetes.Interface, job *batchv1.Job) (*schedulingv1alpha2.Workload, *schedulingv1alpha2.PodGroup) {
	t.Helper()
	var wl *schedulingv1alpha2.Workload
	var pg *schedulingv1alpha2.PodGroup
	framework.WaitFor(t, "the Job's Workload and PodGroup", func(ctx context.Context) (bool, error) {
		var err error
		if wl, err = workloadOf(ctx, c, job); err != nil || wl == nil {
			return false, err
		}
		pg, err = podGroupOf(ctx, c, job)
		return pg != nil, err
	})
	return wl, pg
}

// TestJobGangScheduling: the cases of upstream's test of the same name.
func TestJobGangScheduling(t *testing.T) {
	gang := func(n int32) *builder.JobWrapper {
		return builder.MakeJob("gang", "").Indexed().Parallelism(n).Completions(n)
	}
	for name, tc := range map[string]struct {
		job             *batchv1.Job
		gang            bool
		wantActive      int32
		suspend         bool
		restart         bool
		wantGroupName   string
		parallelismTo   *int32
		wantForbiddance string
	}{
		"eligible job creates workload and podgroup": {job: gang(4).Obj(), gang: true, wantActive: 4},
		"non-indexed job":            {job: builder.MakeJob("gang", "").Parallelism(3).NoCompletions().Obj(), wantActive: 3},
		"parallelism=1":              {job: gang(1).Obj(), wantActive: 1},
		"completions != parallelism": {job: builder.MakeJob("gang", "").Indexed().Parallelism(2).Completions(5).Obj(), wantActive: 2},
		"high-level controller owns scheduling objects via existing schedulingGroup": {
			job: func() *batchv1.Job {
				j := gang(4).Obj()
				j.Spec.Template.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("external-pod-group")}
				return j
			}(),
			wantActive: 4, wantGroupName: "external-pod-group",
		},
		"suspended job creates workload before pods": {job: gang(4).Suspend(true).Obj(), gang: true, wantActive: 4, suspend: true},
		"controller restart preserves workload":      {job: gang(4).Obj(), gang: true, wantActive: 4, restart: true},
		"parallelism update blocked": {
			job: gang(4).Obj(), gang: true, wantActive: 4, parallelismTo: ptr.To[int32](2), wantForbiddance: "cannot change parallelism",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := framework.Client(t)
			tc.job.Namespace = framework.CreateNamespace(t)
			run := framework.StartJobController(t, options(), nil)
			job, err := c.BatchV1().Jobs(tc.job.Namespace).Create(ctx, tc.job, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.suspend {
				waitForGang(t, c, job)
				if pods, err := framework.JobPods(ctx, c, job); err != nil || len(pods) != 0 {
					t.Fatalf("a suspended Job has %d pods (%v), want none", len(pods), err)
				}
				job = framework.UpdateJob(t, c, job, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) })
			}
			if tc.restart {
				first, _ := waitForGang(t, c, job)
				run.Stop()
				framework.StartJobController(t, options(), nil)
				job = framework.UpdateJob(t, c, job, func(j *batchv1.Job) { metav1.SetMetaDataAnnotation(&j.ObjectMeta, "test-resync", "true") })
				framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: tc.wantActive})
				if l, err := c.SchedulingV1alpha2().Workloads(job.Namespace).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
					t.Errorf("Workloads after the restart: %v (%v), want one", l, err)
				}
				if again, _ := waitForGang(t, c, job); again.UID != first.UID {
					t.Errorf("the Workload changed after the restart: %s, was %s", again.UID, first.UID)
				}
			}

			var wl *schedulingv1alpha2.Workload
			var pg *schedulingv1alpha2.PodGroup
			if tc.gang {
				wl, pg = waitForGang(t, c, job)
			}
			framework.WaitForJobPodsStatus(t, c, job, framework.PodsStatus{Active: tc.wantActive})
			if !tc.gang {
				// Nothing appears later either.
				time.Sleep(time.Second)
				if wl, err := workloadOf(ctx, c, job); err != nil || wl != nil {
					t.Errorf("Workload %v (%v), want none", wl, err)
				}
				if pg, err := podGroupOf(ctx, c, job); err != nil || pg != nil {
					t.Errorf("PodGroup %v (%v), want none", pg, err)
				}
			}
			pods, err := framework.JobPods(ctx, c, job)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.wantGroupName
			if pg != nil {
				want = pg.Name
				owners := map[types.UID]bool{}
				for _, ref := range pg.OwnerReferences {
					owners[ref.UID] = true
				}
				if !owners[job.UID] || !owners[wl.UID] {
					t.Errorf("PodGroup owners %v, want the Job and the Workload", pg.OwnerReferences)
				}
			}
			for _, p := range pods {
				got := ""
				if g := p.Spec.SchedulingGroup; g != nil {
					got = ptr.Deref(g.PodGroupName, "")
				}
				if got != want {
					t.Errorf("pod %s: schedulingGroup %q, want %q", p.Name, got, want)
				}
			}
			if tc.parallelismTo != nil {
				_, err := c.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType,
					[]byte(fmt.Sprintf(`{"spec":{"parallelism":%d}}`, *tc.parallelismTo)), metav1.PatchOptions{})
				if !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), tc.wantForbiddance) {
					t.Errorf("changing parallelism: %v, want Forbidden with %q", err, tc.wantForbiddance)
				}
			}
		})
	}
}

// TestJobAdmissionParallelismUpdate: the gates-on cases of upstream's test
// of the same name (the apiserver's admission, with this controller).
func TestJobAdmissionParallelismUpdate(t *testing.T) {
	for name, tc := range map[string]struct {
		job       *batchv1.Job
		gang      bool
		forbidden bool
	}{
		"parallelism update blocked for gang-scheduled job":     {job: builder.MakeJob("p", "").Indexed().Parallelism(4).Completions(4).Obj(), gang: true, forbidden: true},
		"parallelism update allowed for non-indexed job":        {job: builder.MakeJob("p", "").Parallelism(3).NoCompletions().Obj()},
		"parallelism update allowed for single-pod indexed job": {job: builder.MakeJob("p", "").Indexed().Parallelism(1).Completions(1).Obj()},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := framework.Client(t)
			tc.job.Namespace = framework.CreateNamespace(t)
			framework.StartJobController(t, options(), nil)
			job, err := c.BatchV1().Jobs(tc.job.Namespace).Create(ctx, tc.job, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.gang {
				waitForGang(t, c, job)
			}
			_, err = c.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType, []byte(`{"spec":{"parallelism":2}}`), metav1.PatchOptions{})
			switch {
			case tc.forbidden && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot change parallelism")):
				t.Errorf("changing parallelism: %v, want Forbidden: cannot change parallelism", err)
			case !tc.forbidden && err != nil:
				t.Errorf("changing parallelism: %v, want it allowed", err)
			}
		})
	}
}
