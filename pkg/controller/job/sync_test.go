package job

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

const ns = "ns"

// harness is a controller on a fake clientset whose informer stores are
// filled by hand, and a fake clock.
type harness struct {
	c      *Controller
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	events *record.FakeRecorder
	ctx    context.Context
	// factory holds the informers whose stores the test fills.
	factory informers.SharedInformerFactory
}

func newHarness(t *testing.T, opts Options, job *batchv1.Job, pods ...*corev1.Pod) *harness {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	objs := []runtime.Object{job}
	for _, p := range pods {
		objs = append(objs, p)
	}
	client := fake.NewClientset(objs...)
	var seq atomic.Int32
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if pod.UID == "" {
			// The controller names its pods; the test gives them ordered
			// names and UIDs, as the apiserver would give unique ones.
			n := seq.Add(1)
			pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, n)
			pod.UID = types.UID(fmt.Sprintf("created-%d", n))
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(t0)
	opts.Clock = clk
	opts.SyncBatchPeriod = -1
	factory := informers.NewSharedInformerFactory(client, 0)
	if opts.Workloads != nil {
		// WorkloadWithJob on: the informers of this factory.
		opts.Workloads = &WorkloadInformers{Workloads: factory.Scheduling().V1alpha2().Workloads(), PodGroups: factory.Scheduling().V1alpha2().PodGroups()}
	}
	c, err := NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, opts)
	if err != nil {
		t.Fatal(err)
	}
	events := record.NewFakeRecorder(1000)
	c.recorder = events
	c.pods.recorder = events
	if err := factory.Batch().V1().Jobs().Informer().GetIndexer().Add(job); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := factory.Core().V1().Pods().Informer().GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return &harness{c: c, client: client, clock: clk, events: events, ctx: ctx, factory: factory}
}

// sync runs one sync of the Job and returns the Job and pods as stored.
func (h *harness) sync(t *testing.T, job *batchv1.Job) (*batchv1.Job, []corev1.Pod) {
	t.Helper()
	if err := h.c.syncJob(h.ctx, jobKey(job)); err != nil {
		t.Fatalf("syncJob: %v", err)
	}
	got, err := h.client.BatchV1().Jobs(job.Namespace).Get(h.ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := h.client.CoreV1().Pods(job.Namespace).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	return got, pods.Items
}

// syncFresh builds a harness holding job and pods, clears the actions the
// setup recorded, and runs one sync of the Job.
func syncFresh(t *testing.T, opts Options, job *batchv1.Job, pods ...*corev1.Pod) (*harness, *batchv1.Job, []corev1.Pod) {
	t.Helper()
	h := newHarness(t, opts, job, pods...)
	h.client.ClearActions()
	got, gotPods := h.sync(t, job)
	return h, got, gotPods
}

// checkSyncEffects compares what a sync left behind besides the Job status:
// the number of pods, how many still hold the tracking finalizer, the API
// writes and the event reasons (in any order).
func (h *harness) checkSyncEffects(t *testing.T, gotPods []corev1.Pod, wantPods, wantFinalizers int, wantWrites map[string]int, wantEvents []string) {
	t.Helper()
	if len(gotPods) != wantPods {
		t.Errorf("got %d pods, want %d", len(gotPods), wantPods)
	}
	if n := finalizersLeft(gotPods); n != wantFinalizers {
		t.Errorf("%d pods hold the finalizer, want %d", n, wantFinalizers)
	}
	if diff := cmp.Diff(wantWrites, h.writes(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantEvents, h.drainEvents(), cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// drainEvents returns the reasons of the recorded events, in order.
func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			var typ, reason string
			fmt.Sscanf(e, "%s %s", &typ, &reason)
			out = append(out, reason)
		default:
			return out
		}
	}
}

// writes counts the mutating API calls by verb and resource.
func (h *harness) writes() map[string]int {
	out := map[string]int{}
	for _, a := range h.client.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			key := a.GetVerb() + " " + a.GetResource().Resource
			if a.GetSubresource() != "" {
				key += "/" + a.GetSubresource()
			}
			out[key]++
		}
	}
	return out
}

// statusCounts is the part of a Job status most tests compare.
type statusCounts struct {
	Active, Ready, Terminating, Succeeded, Failed int32
	CompletedIndexes                              string
	Uncounted                                     int
	Conditions                                    []string
	Started, Completed                            bool
}

func countsOf(job *batchv1.Job) statusCounts {
	s := job.Status
	out := statusCounts{
		Active: s.Active, Ready: ptr.Deref(s.Ready, -1), Terminating: ptr.Deref(s.Terminating, -1),
		Succeeded: s.Succeeded, Failed: s.Failed, CompletedIndexes: s.CompletedIndexes,
		Started: s.StartTime != nil, Completed: s.CompletionTime != nil,
	}
	if u := s.UncountedTerminatedPods; u != nil {
		out.Uncounted = len(u.Succeeded) + len(u.Failed)
	}
	for _, c := range s.Conditions {
		out.Conditions = append(out.Conditions, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}

func finalizersLeft(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if hasTrackingFinalizer(&pods[i]) {
			n++
		}
	}
	return n
}

func TestSyncOutcomes(t *testing.T) {
	const uid = "job-uid"
	base := func() *builder.JobWrapper { return builder.MakeJob("j", ns).Selector(uid).ManagedBy(DefaultManagedBy) }
	started := metav1.NewTime(t0.Add(-time.Minute))
	running := batchv1.JobStatus{StartTime: &started, Active: 2, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}
	pod := func(name string, job *batchv1.Job) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).NodeName("n")
	}
	finishedAt := metav1.NewTime(t0.Add(-time.Second))

	cases := map[string]struct {
		// setup
		opts Options
		job  *batchv1.Job
		pods func(job *batchv1.Job) []*corev1.Pod
		// want
		want           statusCounts
		wantPods       int
		wantFinalizers int
		wantWrites     map[string]int
		wantEvents     []string
	}{
		"new job creates parallelism pods": {
			job:            base().Parallelism(2).Completions(5).Obj(),
			want:           statusCounts{Active: 2, Started: true},
			wantPods:       2,
			wantFinalizers: 2,
			wantWrites:     map[string]int{"create pods": 2, "update jobs/status": 1},
			wantEvents:     []string{"SuccessfulCreate", "SuccessfulCreate"},
		},
		"work queue job creates parallelism pods": {
			job:            base().Parallelism(3).NoCompletions().Obj(),
			want:           statusCounts{Active: 3, Started: true},
			wantPods:       3,
			wantFinalizers: 3,
			wantWrites:     map[string]int{"create pods": 3, "update jobs/status": 1},
			wantEvents:     []string{"SuccessfulCreate", "SuccessfulCreate", "SuccessfulCreate"},
		},
		"foreign managedBy untouched": {
			job:        builder.MakeJob("j", ns).Selector(uid).ManagedBy("example.com/other").Obj(),
			wantWrites: map[string]int{},
		},
		"unclaimed job untouched by default": {
			job:        builder.MakeJob("j", ns).Selector(uid).Obj(),
			wantWrites: map[string]int{},
		},
		"unclaimed job managed on request": {
			opts:           Options{ManageUnclaimedJobs: true},
			job:            builder.MakeJob("j", ns).Selector(uid).Obj(),
			want:           statusCounts{Active: 1, Started: true},
			wantPods:       1,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"create pods": 1, "update jobs/status": 1},
			wantEvents:     []string{"SuccessfulCreate"},
		},
		"succeeded pods complete the job": {
			job: base().Parallelism(2).Completions(2).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", job).Terminated(0, finishedAt).Obj(),
					pod("b", job).Terminated(0, finishedAt).Obj(),
				}
			},
			want: statusCounts{Succeeded: 2, Started: true, Completed: true,
				Conditions: []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}},
			wantPods: 2,
			// Uncounted UIDs and the interim condition, the finalizers,
			// then the counters and the terminal condition.
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 2},
			wantEvents: []string{"Completed"},
		},
		"backoff limit exceeded fails the job": {
			job: base().Parallelism(2).Completions(4).BackoffLimit(1).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", job).Terminated(1, finishedAt).Obj(),
					pod("b", job).Terminated(1, finishedAt).Obj(),
				}
			},
			want: statusCounts{Failed: 2, Started: true,
				Conditions: []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}},
			wantPods:   2,
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 2},
			wantEvents: []string{"BackoffLimitExceeded"},
		},
		"failing job deletes active pods and waits for them": {
			job: base().Parallelism(2).Completions(4).BackoffLimit(0).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", job).Terminated(1, finishedAt).Obj(),
					pod("b", job).Phase(corev1.PodRunning).Ready().Obj(),
				}
			},
			// b is deleted with its finalizer; as the Job is failing it goes
			// to uncountedTerminatedPods at once (status write 1), and, once
			// both finalizers are removed, into the counter in the same sync
			// (status write 2). Failed waits until b stops terminating.
			want: statusCounts{Failed: 2, Terminating: 1, Started: true,
				Conditions: []string{"FailureTarget=True/BackoffLimitExceeded"}},
			wantPods:   1,
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 2, "delete pods": 1},
			wantEvents: []string{"SuccessfulDelete"},
		},
		"container restarts reach backoffLimit with OnFailure": {
			job: base().Parallelism(1).Completions(1).BackoffLimit(2).RestartPolicy(corev1.RestartPolicyOnFailure).
				Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				p := pod("a", job).Phase(corev1.PodRunning).Obj()
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 2}}
				return []*corev1.Pod{p}
			},
			want: statusCounts{Failed: 1, Terminating: 1, Started: true,
				Conditions: []string{"FailureTarget=True/BackoffLimitExceeded"}},
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 1, "delete pods": 1},
			wantEvents: []string{"SuccessfulDelete"},
		},
		"deadline exceeded fails the job": {
			job: base().Parallelism(1).Completions(1).ActiveDeadlineSeconds(30).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("a", job).Phase(corev1.PodRunning).Obj()}
			},
			want: statusCounts{Failed: 1, Terminating: 1, Started: true,
				Conditions: []string{"FailureTarget=True/DeadlineExceeded"}},
			wantPods:   0,
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 1, "delete pods": 1},
			wantEvents: []string{"SuccessfulDelete"},
		},
		"created suspended": {
			job:        base().Parallelism(2).Completions(2).Suspend(true).Obj(),
			want:       statusCounts{Conditions: []string{"Suspended=True/JobSuspended"}},
			wantWrites: map[string]int{"update jobs/status": 1},
			wantEvents: []string{"Suspended"},
		},
		"suspending deletes active pods without counting them": {
			job: base().Parallelism(2).Completions(4).Suspend(true).Status(batchv1.JobStatus{
				StartTime: &started, Active: 2, Succeeded: 1, Ready: ptr.To[int32](1), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", job).Phase(corev1.PodRunning).Ready().Obj(),
					pod("b", job).Phase(corev1.PodPending).Obj(),
				}
			},
			want:       statusCounts{Succeeded: 1, Terminating: 2, Conditions: []string{"Suspended=True/JobSuspended"}},
			wantWrites: map[string]int{"update jobs/status": 1, "patch pods": 2, "delete pods": 2},
			wantEvents: []string{"SuccessfulDelete", "SuccessfulDelete", "Suspended"},
		},
		"resuming creates pods and restarts the clock": {
			job: base().Parallelism(2).Completions(4).Suspend(false).Status(batchv1.JobStatus{
				Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
				Conditions: []batchv1.JobCondition{*newCondition(batchv1.JobSuspended, corev1.ConditionTrue, reasonSuspended, msgSuspended, t0.Add(-time.Hour))}}).Obj(),
			want:           statusCounts{Active: 2, Succeeded: 1, Started: true, Conditions: []string{"Suspended=False/JobResumed"}},
			wantPods:       2,
			wantFinalizers: 2,
			wantWrites:     map[string]int{"create pods": 2, "update jobs/status": 1},
			wantEvents:     []string{"SuccessfulCreate", "SuccessfulCreate", "Resumed"},
		},
		"lowered parallelism deletes pods without counting them": {
			job: base().Parallelism(1).Completions(4).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{
					pod("a", job).Phase(corev1.PodRunning).Ready().Obj(),
					pod("b", job).Phase(corev1.PodPending).Obj(),
				}
			},
			want:           statusCounts{Active: 1, Ready: 1, Terminating: 1, Started: true},
			wantPods:       1,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"update jobs/status": 1, "patch pods": 1, "delete pods": 1},
			wantEvents:     []string{"SuccessfulDelete"},
		},
		"failed pod within backoff is not replaced": {
			job: base().Parallelism(1).Completions(2).Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("a", job).Terminated(1, finishedAt).Obj()}
			},
			want:       statusCounts{Failed: 1, Started: true},
			wantPods:   1,
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 1},
		},
		"uncounted pods are capped per sync": {
			opts: Options{MaxUncountedPods: 2},
			job:  base().Parallelism(5).Completions(5).Status(running).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				var out []*corev1.Pod
				for _, n := range []string{"a", "b", "c", "d", "e"} {
					out = append(out, pod(n, job).Terminated(0, finishedAt).Obj())
				}
				return out
			},
			// The two pods the cap lets in are released and counted in this
			// sync (status write 2); the other three wait for the next one.
			want:           statusCounts{Succeeded: 2, Started: true, Conditions: []string{"SuccessCriteriaMet=True/CompletionsReached"}},
			wantPods:       5,
			wantFinalizers: 3,
			wantWrites:     map[string]int{"update jobs/status": 2, "patch pods": 2},
		},
		"pod deleted by someone else counts as failed": {
			job: base().Parallelism(1).Completions(1).Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("a", job).Phase(corev1.PodRunning).DeletionTimestamp(metav1.NewTime(t0)).Obj()}
			},
			want:       statusCounts{Failed: 1, Terminating: 1, Started: true},
			wantPods:   1,
			wantWrites: map[string]int{"update jobs/status": 2, "patch pods": 1},
		},
		"replacement policy Failed waits for terminating pods": {
			job: base().Parallelism(1).Completions(1).PodReplacementPolicy(batchv1.Failed).
				Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("a", job).Phase(corev1.PodRunning).DeletionTimestamp(metav1.NewTime(t0)).Obj()}
			},
			want:           statusCounts{Terminating: 1, Started: true},
			wantPods:       1,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"update jobs/status": 1},
		},
		"replacement policy TerminatingOrFailed replaces terminating pods": {
			job: base().Parallelism(1).Completions(1).
				Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{pod("a", job).Phase(corev1.PodRunning).DeletionTimestamp(metav1.NewTime(t0.Add(-time.Minute))).Obj()}
			},
			want:           statusCounts{Active: 1, Terminating: 1, Failed: 1, Started: true},
			wantPods:       2,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"update jobs/status": 2, "patch pods": 1, "create pods": 1},
			wantEvents:     []string{"SuccessfulCreate"},
		},
		"orphan matching pod is adopted with the finalizer": {
			job: base().Parallelism(1).Completions(1).Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				return []*corev1.Pod{builder.MakePod("orphan", ns).UID("orphan").Label(batchv1.ControllerUidLabel, uid).Phase(corev1.PodRunning).Obj()}
			},
			want:           statusCounts{Active: 1, Started: true},
			wantPods:       1,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"patch pods": 1},
		},
		"owned pod no longer matching is released": {
			job: base().Parallelism(1).Completions(1).Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj(),
			pods: func(job *batchv1.Job) []*corev1.Pod {
				p := pod("stray", job).Phase(corev1.PodRunning).Obj()
				p.Labels = map[string]string{"other": "x"}
				return []*corev1.Pod{p}
			},
			want:           statusCounts{Active: 1, Started: true},
			wantPods:       2,
			wantFinalizers: 1,
			wantWrites:     map[string]int{"patch pods": 1, "create pods": 1},
			wantEvents:     []string{"SuccessfulCreate"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var pods []*corev1.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			h, got, gotPods := syncFresh(t, tc.opts, tc.job, pods...)
			if diff := cmp.Diff(tc.want, countsOf(got), cmpopts.EquateEmpty()); diff != "" && len(tc.wantWrites) > 0 {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if len(tc.wantWrites) == 0 {
				if diff := cmp.Diff(tc.job.Status, got.Status); diff != "" {
					t.Errorf("status of an unmanaged job changed (-want +got):\n%s", diff)
				}
			}
			h.checkSyncEffects(t, gotPods, tc.wantPods, tc.wantFinalizers, tc.wantWrites, tc.wantEvents)
		})
	}
}

func TestSyncIndexedCreatesIndexedPods(t *testing.T) {
	job := builder.MakeJob("idx", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(3).Completions(5).
		Status(batchv1.JobStatus{CompletedIndexes: "1", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	h := newHarness(t, Options{}, job)
	got, pods := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Active: 3, Succeeded: 1, CompletedIndexes: "1", Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	type podShape struct {
		GenerateName, Hostname, IndexAnnotation, IndexLabel, EnvPath string
		Finalizer                                                    bool
	}
	var shapes []podShape
	for _, p := range pods {
		env := p.Spec.Containers[0].Env
		var path string
		if len(env) == 1 && env[0].Name == "JOB_COMPLETION_INDEX" {
			path = env[0].ValueFrom.FieldRef.FieldPath
		}
		shapes = append(shapes, podShape{
			GenerateName: p.GenerateName, Hostname: p.Spec.Hostname,
			IndexAnnotation: p.Annotations[batchv1.JobCompletionIndexAnnotation], IndexLabel: p.Labels[batchv1.JobCompletionIndexAnnotation],
			EnvPath: path, Finalizer: hasTrackingFinalizer(&p),
		})
	}
	sort.Slice(shapes, func(i, j int) bool { return shapes[i].IndexAnnotation < shapes[j].IndexAnnotation })
	envPath := "metadata.labels['batch.kubernetes.io/job-completion-index']"
	want := []podShape{
		{"idx-0-", "idx-0", "0", "0", envPath, true},
		{"idx-2-", "idx-2", "2", "2", envPath, true},
		{"idx-3-", "idx-3", "3", "3", envPath, true},
	}
	if diff := cmp.Diff(want, shapes); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

func TestSyncIndexedSucceededAndDuplicates(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("idx", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(2).Completions(4).
		Status(batchv1.JobStatus{StartTime: &started, Active: 3, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	p := func(name, ix string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).NodeName("n")
	}
	h := newHarness(t, Options{}, job,
		p("a", "0").Terminated(0, metav1.NewTime(t0)).Obj(),
		p("b", "2").Terminated(0, metav1.NewTime(t0)).Obj(),
		p("c", "3").Terminated(0, metav1.NewTime(t0)).Obj(),
		p("d", "1").Phase(corev1.PodRunning).Obj(),
		p("e", "1").Phase(corev1.PodPending).Obj(),
		p("f", "9").Phase(corev1.PodRunning).Obj(),
	)
	got, pods := h.sync(t, job)
	// e duplicates index 1 and f is out of range: both deleted, not counted.
	if diff := cmp.Diff(statusCounts{Active: 1, Terminating: 2, Succeeded: 3, CompletedIndexes: "0,2,3", Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if n := finalizersLeft(pods); n != 1 {
		t.Errorf("%d pods hold the finalizer, want 1 (the running pod of index 1)", n)
	}
}

func TestSyncBackoffDelaysRecreation(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).
		Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	failedPod := builder.MakePod("a", ns).UID("a").OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Terminated(1, metav1.NewTime(t0)).Obj()
	h := newHarness(t, Options{PodFailureBackoff: 10 * time.Second}, job, failedPod)
	got, pods := h.sync(t, job)
	// The failure is accounted in this sync: released and moved into
	// status.failed (status write 2), with no replacement yet.
	if got.Status.Failed != 1 || len(got.Status.UncountedTerminatedPods.Failed) != 0 || len(pods) != 1 {
		t.Fatalf("after the failure: failed=%d uncounted=%v pods=%d, want the pod counted and 1 pod", got.Status.Failed, got.Status.UncountedTerminatedPods, len(pods))
	}
	// The informers would now show the counted Job and the released pod.
	released := failedPod.DeepCopy()
	released.Finalizers = nil
	if err := h.c.podIndexer.Update(released); err != nil {
		t.Fatal(err)
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(9 * time.Second)
	h.client.ClearActions()
	got, pods = h.sync(t, got)
	if len(pods) != 1 {
		t.Fatalf("within the backoff: %d pods, want 1 (no replacement)", len(pods))
	}
	if got.Status.Failed != 1 || len(got.Status.UncountedTerminatedPods.Failed) != 0 {
		t.Fatalf("second sync: failed=%d uncounted=%v, want the pod counted once", got.Status.Failed, got.Status.UncountedTerminatedPods)
	}
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(2 * time.Second)
	_, pods = h.sync(t, got)
	if len(pods) != 2 {
		t.Fatalf("after the backoff: %d pods, want 2 (one replacement)", len(pods))
	}
}

// refreshJob puts the stored Job into the informer cache.
func refreshJob(h *harness, job *batchv1.Job) error {
	stored, err := h.client.BatchV1().Jobs(job.Namespace).Get(h.ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return h.factory.Batch().V1().Jobs().Informer().GetIndexer().Update(stored)
}

// TestSyncStalePodCacheDoesNotRecount: a pod whose finalizer removal is in
// flight (the cache still shows the finalizer) was already counted; a sync
// must neither count it again nor write anything.
func TestSyncStalePodCacheDoesNotRecount(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(2).Completions(3).
		Status(batchv1.JobStatus{StartTime: &started, Active: 1, Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
			UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{}}).Obj()
	p := func(name string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).NodeName("n")
	}
	h := newHarness(t, Options{}, job, p("done").Terminated(0, metav1.NewTime(t0)).Obj(), p("running").Phase(corev1.PodRunning).Obj(), p("new").Phase(corev1.PodPending).Obj())
	h.c.finalizers.expect(jobKey(job), []types.UID{"done"})
	h.client.ClearActions()
	got, _ := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Active: 2, Succeeded: 1, Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"update jobs/status": 1}, h.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

// TestSyncFailedReleaseHoldsTheTerminalCondition: a finalizer patch that
// fails keeps the pod's UID uncounted, so the Job is not marked Complete
// (KEP-2307's order: the terminal condition only once every pod is counted
// and released); the next sync releases the pod and completes the Job.
func TestSyncFailedReleaseHoldsTheTerminalCondition(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(1).Completions(1).
		Status(batchv1.JobStatus{StartTime: &started, Active: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	pod := builder.MakePod("a", ns).UID("a").OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Terminated(0, metav1.NewTime(t0)).Obj()
	h := newHarness(t, Options{}, job, pod)
	failPatch := true
	h.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failPatch {
			return true, nil, fmt.Errorf("injected patch failure")
		}
		return false, nil, nil
	})
	if err := h.c.syncJob(h.ctx, jobKey(job)); err == nil {
		t.Fatal("first sync: want the patch error")
	}
	got, err := h.client.BatchV1().Jobs(ns).Get(h.ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(statusCounts{Uncounted: 1, Started: true,
		Conditions: []string{"SuccessCriteriaMet=True/CompletionsReached"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status after the failed release (-want +got):\n%s", diff)
	}
	if _, orphans := queued(h.c); len(orphans) != 0 {
		t.Errorf("orphan queue %v, want empty: the Job itself retries", orphans)
	}

	failPatch = false
	if err := refreshJob(h, got); err != nil {
		t.Fatal(err)
	}
	got, pods := h.sync(t, got)
	if diff := cmp.Diff(statusCounts{Succeeded: 1, Started: true, Completed: true,
		Conditions: []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status after the retry (-want +got):\n%s", diff)
	}
	if n := finalizersLeft(pods); n != 0 {
		t.Errorf("%d pods hold the finalizer, want 0", n)
	}
}

// TestSyncCompletionWaitsForExpectations: the Job's pods all succeeded as
// far as the cache shows, but a pod create of an earlier sync is not in
// the cache yet; the Job is not judged complete until it is (that pod
// would run for a finished Job), as upstream waits for its expectations.
func TestSyncCompletionWaitsForExpectations(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("j", ns).Selector("u").ManagedBy(DefaultManagedBy).Parallelism(2).Completions(2).
		Status(batchv1.JobStatus{StartTime: &started, Active: 2, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	p := func(name string) *corev1.Pod {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Terminated(0, metav1.NewTime(t0)).Obj()
	}
	h := newHarness(t, Options{}, job, p("a"), p("b"))
	key := jobKey(job)
	h.c.expectations.expect(key, 1, 0)
	got, _ := h.sync(t, job)
	if conds := countsOf(got).Conditions; len(conds) != 0 {
		t.Errorf("conditions %v with a create unseen, want none", conds)
	}
	checkSyncedAtExpiry(t, h, key)
	got = syncCreateSeen(t, h, key, got)
	if diff := cmp.Diff([]string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}, countsOf(got).Conditions); diff != "" {
		t.Errorf("conditions once the create is seen (-want +got):\n%s", diff)
	}
}

// syncCreateSeen records the one expected create of the Job key as seen,
// as the pod's add event would, and syncs the Job again.
func syncCreateSeen(t *testing.T, h *harness, key string, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	h.c.expectations.observe(key, 1, 0)
	if err := refreshJob(h, job); err != nil {
		t.Fatal(err)
	}
	got, _ := h.sync(t, job)
	return got
}

// checkSyncedAtExpiry checks that the sync just run left the Job key to
// be queued when its pod expectations expire, plus a second: not at once,
// and then. It drains the queue and moves the clock past the expiry.
func checkSyncedAtExpiry(t *testing.T, h *harness, key string) {
	t.Helper()
	if jobs, _ := queued(h.c); len(jobs) != 0 {
		t.Errorf("queued %v at once, want nothing before the expectations expire", jobs)
	}
	h.clock.Step(expectationsTimeout + time.Second)
	// The delaying queue adds due keys from its own goroutine.
	for deadline := time.Now().Add(10 * time.Second); h.c.queue.Len() == 0 && time.Now().Before(deadline); {
		goruntime.Gosched()
	}
	if jobs, _ := queued(h.c); !slices.Equal(jobs, []string{key}) {
		t.Errorf("queued %v once the expectations expired, want [%s]", jobs, key)
	}
}

// TestSyncSuccessPolicyWaitsForExpectations: a successPolicy met while a
// pod create of an earlier sync is not in the cache yet deletes nothing
// and declares nothing; once the create is seen, the pods of the other
// indexes are deleted and, the Job succeeding, never counted as failed.
// Deleting them in the first sync would have the second find them deleted
// and count them as failures.
func TestSyncSuccessPolicyWaitsForExpectations(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("sp", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(3).Completions(3).
		SuccessPolicy(builder.SucceededCountRule(1)).
		Status(batchv1.JobStatus{StartTime: &started, Active: 3, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	pod := func(name, ix string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).NodeName("n")
	}
	h := newHarness(t, Options{}, job,
		pod("a", "0").Terminated(0, metav1.NewTime(t0)).Obj(),
		pod("b", "1").Phase(corev1.PodRunning).Obj(),
		pod("c", "2").Phase(corev1.PodPending).Obj())
	key := jobKey(job)
	h.c.expectations.expect(key, 1, 0)
	h.client.ClearActions()
	got, pods := h.sync(t, job)
	if len(pods) != 3 || countsOf(got).Conditions != nil {
		t.Errorf("with a create unseen: %d pods and conditions %v, want 3 pods and no condition", len(pods), countsOf(got).Conditions)
	}
	if n := h.writes()["delete pods"]; n != 0 {
		t.Errorf("%d pods deleted with a create unseen, want 0", n)
	}
	// Were the create lost for good, no event would come: the Job is
	// synced again once the expectation expires.
	checkSyncedAtExpiry(t, h, key)
	got = syncCreateSeen(t, h, key, got)
	if diff := cmp.Diff(statusCounts{Succeeded: 1, CompletedIndexes: "0", Terminating: 2, Started: true,
		Conditions: []string{"SuccessCriteriaMet=True/SuccessPolicy"}}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status once the create is seen (-want +got):\n%s", diff)
	}
	if n := h.writes()["delete pods"]; n != 2 {
		t.Errorf("%d pods deleted once the create is seen, want 2", n)
	}
}

// TestSyncIndexedDeletesActivePodOfSucceededIndex: an active pod of an
// index that already succeeded (created twice around a restart, the first
// finished before the second was seen) can only run the index a second
// time: it is deleted, and the index left without a pod gets one.
func TestSyncIndexedDeletesActivePodOfSucceededIndex(t *testing.T) {
	started := metav1.NewTime(t0.Add(-time.Minute))
	job := builder.MakeJob("idx", ns).Selector("u").ManagedBy(DefaultManagedBy).Indexed().Parallelism(3).Completions(3).
		Status(batchv1.JobStatus{StartTime: &started, Succeeded: 1, CompletedIndexes: "0", Active: 2, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0)}).Obj()
	p := func(name, ix string) *builder.PodWrapper {
		return builder.MakePod(name, ns).UID(name).OwnedByJob(job).Finalizer(batchv1.JobTrackingFinalizer).Index(ix).NodeName("n")
	}
	h := newHarness(t, Options{}, job,
		p("again", "0").Phase(corev1.PodPending).Obj(),
		p("one", "1").Phase(corev1.PodRunning).Obj(),
	)
	got, pods := h.sync(t, job)
	if diff := cmp.Diff(statusCounts{Active: 1, Terminating: 1, Succeeded: 1, CompletedIndexes: "0", Started: true}, countsOf(got), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status after the first sync (-want +got):\n%s", diff)
	}
	for _, pod := range pods {
		if pod.Name == "again" {
			t.Errorf("the second pod of index 0 is still there")
		}
	}
	// The next sync, once the deletion is seen, gives index 2 its pod.
	if err := h.factory.Core().V1().Pods().Informer().GetIndexer().Delete(p("again", "0").Obj()); err != nil {
		t.Fatal(err)
	}
	h.c.expectations.observe(jobKey(job), 0, 1)
	if err := refreshJob(h, job); err != nil {
		t.Fatal(err)
	}
	_, pods = h.sync(t, job)
	var indexes []string
	for _, pod := range pods {
		indexes = append(indexes, pod.Annotations[batchv1.JobCompletionIndexAnnotation])
	}
	sort.Strings(indexes)
	if diff := cmp.Diff([]string{"1", "2"}, indexes); diff != "" {
		t.Errorf("pods' indexes after the second sync (-want +got):\n%s", diff)
	}
}
