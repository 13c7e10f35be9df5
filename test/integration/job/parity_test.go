package job

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	upstreamjob "k8s.io/kubernetes/pkg/controller/job"
	"k8s.io/utils/ptr"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// The parity tests run one scenario twice, once under jobkeeper's controller
// and once under kube-controller-manager's (the k8s.io/kubernetes module's
// Job controller, which manages Jobs without spec.managedBy), and compare
// what each left once the Job finished and no pod holds the tracking
// finalizer: the status without times, and the pods' phases, indexes and
// failure-count annotations. Scenarios only wait for states both
// controllers reach (a pod for an index, the Job finished), never for a
// counter value, since jobkeeper moves counters one sync later.

// parityOutcome is what the two runs are compared on.
type parityOutcome struct {
	Status batchv1.JobStatus
	Pods   []string
}

// startUpstreamController runs kube-controller-manager's Job controller
// with its own client and informers until the test ends.
func startUpstreamController(t *testing.T, backoff time.Duration) {
	t.Helper()
	upstreamjob.DefaultJobPodFailureBackOff = backoff
	client, err := kubernetes.NewForConfig(framework.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := upstreamjob.NewController(ctx, client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 5) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

// runParity runs scenario on the Job made by mk under both controllers
// (one after the other, each in its own namespace) and reports any
// difference in the outcomes.
func runParity(t *testing.T, mk func(ns string) *builder.JobWrapper, scenario func(t *testing.T, c kubernetes.Interface, job *batchv1.Job)) {
	runParityWithBackoff(t, testOptions().PodFailureBackoff, mk, scenario)
}

// runParityWithBackoff is runParity with both controllers' pod failure
// backoff set to backoff.
func runParityWithBackoff(t *testing.T, backoff time.Duration, mk func(ns string) *builder.JobWrapper, scenario func(t *testing.T, c kubernetes.Interface, job *batchv1.Job)) {
	c := framework.Client(t)
	outcomes := map[string]parityOutcome{}
	for _, impl := range []string{"jobkeeper", "upstream"} {
		t.Run(impl, func(t *testing.T) {
			ns := framework.CreateNamespace(t)
			w := mk(ns)
			if impl == "jobkeeper" {
				opts := testOptions()
				opts.PodFailureBackoff = backoff
				startController(t, opts)
				w = w.ManagedBy(jobcontroller.DefaultManagedBy)
			} else {
				startUpstreamController(t, backoff)
			}
			job := createJob(t, c, w.Obj())
			scenario(t, c, job)
			framework.WaitFor(t, "job finished", func(ctx context.Context) (bool, error) {
				j, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				return findCond(j, batchv1.JobComplete) || findCond(j, batchv1.JobFailed), nil
			})
			waitNoFinalizerInNamespace(t, c, ns)
			outcomes[impl] = outcomeOf(t, c, job)
			t.Logf("outcome: %+v conditions=%v", outcomes[impl].Pods, conditionSummary(getJob(t, c, job)))
		})
	}
	if diff := cmp.Diff(outcomes["upstream"], outcomes["jobkeeper"]); diff != "" {
		t.Errorf("outcome (-upstream +jobkeeper):\n%s", diff)
	}
}

// podNameRE matches a namespaced pod name in a condition message.
var podNameRE = regexp.MustCompile(`NS/[a-z0-9-]+`)

// outcomeOf reads the finished Job and its pods.
func outcomeOf(t *testing.T, c kubernetes.Interface, job *batchv1.Job) parityOutcome {
	t.Helper()
	got := getJob(t, c, job)
	st := got.Status
	st.StartTime, st.CompletionTime = nil, nil
	for i := range st.Conditions {
		// FailJob messages name the pod, whose name is random.
		st.Conditions[i].Message = podNameRE.ReplaceAllString(strings.ReplaceAll(st.Conditions[i].Message, job.Namespace, "NS"), "NS/POD")
		st.Conditions[i].LastProbeTime = metav1.Time{}
		st.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	pods, err := framework.JobPods(context.Background(), c, job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("ix=%s phase=%s deleted=%v count=%s ignored=%s",
			p.Annotations[batchv1.JobCompletionIndexAnnotation], p.Status.Phase, p.DeletionTimestamp != nil,
			p.Annotations[batchv1.JobIndexFailureCountAnnotation], p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation]))
	}
	sort.Strings(out)
	return parityOutcome{Status: st, Pods: out}
}

// waitIndexPods waits until index ix has an active pod and n pods in all.
func waitIndexPods(t *testing.T, c kubernetes.Interface, job *batchv1.Job, ix, n int) {
	t.Helper()
	want := strconv.Itoa(ix)
	framework.WaitFor(t, fmt.Sprintf("index %d to have an active pod among %d", ix, n), func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		all, active := 0, 0
		for _, p := range pods {
			if p.Annotations[batchv1.JobCompletionIndexAnnotation] != want {
				continue
			}
			all++
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				active++
			}
		}
		return all == n && active == 1, nil
	})
}

// waitActiveReady marks the Job's active pods that are not Running yet
// Running and Ready, and waits until the Job's status counts n pods active
// and ready (status.ready is counted from the controller's cache). A
// success decided while a pod create is not in a controller's cache yet is
// deferred: upstream then deletes the other pods in one sync and may count
// them as failed in the next, where jobkeeper waits. A scenario that ends
// in success waits here first, so that it compares the decisions and not
// the informers' timing.
func waitActiveReady(t *testing.T, c kubernetes.Interface, job *batchv1.Job, n int) {
	t.Helper()
	ctx := context.Background()
	pods, err := framework.JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodPending || p.Status.Phase == "") {
			if err := framework.SetPodPhase(ctx, c, p, corev1.PodRunning); err != nil {
				t.Fatal(err)
			}
		}
	}
	framework.WaitFor(t, fmt.Sprintf("%d ready pods in the Job's status", n), func(ctx context.Context) (bool, error) {
		j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return j.Status.Active == int32(n) && ptr.Deref(j.Status.Ready, 0) == int32(n), nil
	})
}

// TestParityBackoffLimitPerIndex: an index failing twice past a per-index
// limit of 1 while the others succeed ends in FailedIndexes.
func TestParityBackoffLimitPerIndex(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("bpi", ns).Indexed().Parallelism(3).Completions(3).BackoffLimitPerIndex(1)
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
		waitIndexPods(t, c, job, 1, 2)
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
		framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
		framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodSucceeded)
	})
}

// TestParityBackoffLimitPerIndexPodFailurePolicy: Ignore, Count and FailIndex
// on one index, as carried by the failure-count annotations.
func TestParityBackoffLimitPerIndexPodFailurePolicy(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("bpi", ns).Indexed().Parallelism(2).Completions(2).BackoffLimitPerIndex(2).PodFailurePolicy(
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42))
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		waitIndexPods(t, c, job, 0, 1)
		waitIndexPods(t, c, job, 1, 1)
		failIndexPod(t, c, job, 0, 3)
		waitIndexPods(t, c, job, 0, 2)
		failIndexPod(t, c, job, 0, 1)
		waitIndexPods(t, c, job, 0, 3)
		failIndexPod(t, c, job, 0, 42)
		framework.SetIndexPodPhase(context.Background(), t, c, job, 1, corev1.PodSucceeded)
	})
}

// TestParityMaxFailedIndexes: a second failed index exceeds
// maxFailedIndexes while another index succeeded.
func TestParityMaxFailedIndexes(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("bpi", ns).Indexed().Parallelism(3).Completions(4).BackoffLimitPerIndex(0).MaxFailedIndexes(1)
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
		waitIndexPods(t, c, job, 3, 1)
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
		framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodFailed)
	})
}

// TestParitySuccessPolicy: a succeededIndexes+succeededCount rule met while
// another index has a failure behind it.
func TestParitySuccessPolicy(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("sp", ns).Indexed().Parallelism(3).Completions(3).BackoffLimitPerIndex(1).SuccessPolicy(
			batchv1.SuccessPolicyRule{SucceededIndexes: ptrTo("0-1"), SucceededCount: ptrTo[int32](1)})
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		framework.SetIndexPodPhase(ctx, t, c, job, 2, corev1.PodFailed)
		waitIndexPods(t, c, job, 2, 2)
		waitActiveReady(t, c, job, 3)
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	})
}

// heldIndexPod adds holdFinalizer to the active pod of index ix and returns
// it.
func heldIndexPod(t *testing.T, c kubernetes.Interface, job *batchv1.Job, ix int) *corev1.Pod {
	t.Helper()
	p := indexPod(t, c, job, ix)
	holdPod(t, c, p)
	return p
}

// failHeld waits for the held pod to be deleted and reports it failed
// with f, retrying when a controller changed it meanwhile.
func failHeld(t *testing.T, c kubernetes.Interface, p *corev1.Pod, f framework.PodFailure) {
	t.Helper()
	framework.WaitFor(t, "pod "+p.Name+" deleted and failed", func(ctx context.Context) (bool, error) {
		got, err := c.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.DeletionTimestamp == nil {
			return false, nil
		}
		if err := framework.FailPod(ctx, c, got, f); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
}

// TestParityReplacementFailedIndexed: a deleted pod held terminating, then
// failed, under each podReplacementPolicy.
func TestParityReplacementFailedIndexed(t *testing.T) {
	for _, policy := range []batchv1.PodReplacementPolicy{batchv1.Failed, batchv1.TerminatingOrFailed} {
		t.Run(string(policy), func(t *testing.T) {
			runParity(t, func(ns string) *builder.JobWrapper {
				return builder.MakeJob("rp", ns).Indexed().Parallelism(2).Completions(2).BackoffLimit(3).PodReplacementPolicy(policy)
			}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
				ctx := context.Background()
				waitIndexPods(t, c, job, 0, 1)
				waitIndexPods(t, c, job, 1, 1)
				p := heldIndexPod(t, c, job, 0)
				if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				failHeld(t, c, p, exitCode(137))
				waitIndexPods(t, c, job, 0, 2)
				releaseHeldPods(t, c, job.Namespace)
				framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
				framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
			})
		})
	}
}

// TestParityGlobalBackoffLimitWithPerIndex: backoffLimit still applies to
// the failures of all indexes.
func TestParityGlobalBackoffLimitWithPerIndex(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("bpi", ns).Indexed().Parallelism(2).Completions(2).BackoffLimitPerIndex(2).BackoffLimit(1)
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		waitIndexPods(t, c, job, 0, 1)
		waitIndexPods(t, c, job, 1, 1)
		framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodFailed)
		waitIndexPods(t, c, job, 0, 2)
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodFailed)
	})
}

// TestParitySuccessPolicyCountWithHeldPods: a succeededCount-only rule met;
// the deleted pods of the other indexes fail and succeed after it.
func TestParitySuccessPolicyCountWithHeldPods(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("sp", ns).Indexed().Parallelism(3).Completions(3).SuccessPolicy(
			batchv1.SuccessPolicyRule{SucceededCount: ptrTo[int32](1)})
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		p1 := heldIndexPod(t, c, job, 1)
		p2 := heldIndexPod(t, c, job, 2)
		waitActiveReady(t, c, job, 3)
		framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
		failHeld(t, c, p1, exitCode(1))
		failHeld(t, c, p2, framework.PodFailure{ExitCodes: map[string]int32{"main": 0}})
		releaseHeldPods(t, c, job.Namespace)
	})
}

// TestParityMaxFailedIndexesWithHeldPods: maxFailedIndexes 0 exceeded; the
// deleted pods then fail, one with DisruptionTarget under an Ignore rule.
func TestParityMaxFailedIndexesWithHeldPods(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("bpi", ns).Indexed().Parallelism(3).Completions(3).BackoffLimitPerIndex(0).MaxFailedIndexes(0).
			PodFailurePolicy(builder.PodConditionRule(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget))
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		p1 := heldIndexPod(t, c, job, 1)
		p2 := heldIndexPod(t, c, job, 2)
		failIndexPod(t, c, job, 0, 1)
		failHeld(t, c, p1, framework.PodFailure{ExitCodes: map[string]int32{"main": 137}, Conditions: []corev1.PodConditionType{corev1.DisruptionTarget}})
		failHeld(t, c, p2, exitCode(1))
		releaseHeldPods(t, c, job.Namespace)
	})
}

// TestParityFailJobWithHeldPod: a FailJob match after an ignored failure,
// with a deleted pod failing afterwards under an Ignore rule.
func TestParityFailJobWithHeldPod(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("fj", ns).Indexed().Parallelism(3).Completions(3).BackoffLimitPerIndex(1).PodFailurePolicy(
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42))
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		failIndexPod(t, c, job, 0, 3)
		waitIndexPods(t, c, job, 0, 2)
		framework.SetIndexPodPhase(context.Background(), t, c, job, 2, corev1.PodSucceeded)
		p1 := heldIndexPod(t, c, job, 1)
		failIndexPod(t, c, job, 0, 42)
		failHeld(t, c, p1, exitCode(3))
		releaseHeldPods(t, c, job.Namespace)
	})
}

// TestParityPerIndexExternalDeletion: pods deleted by someone else count as
// index failures under TerminatingOrFailed.
func TestParityPerIndexExternalDeletion(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("del", ns).Indexed().Parallelism(2).Completions(2).BackoffLimitPerIndex(1)
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		waitIndexPods(t, c, job, 0, 1)
		waitIndexPods(t, c, job, 1, 1)
		p := heldIndexPod(t, c, job, 0)
		if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitIndexPods(t, c, job, 0, 2)
		failHeld(t, c, p, exitCode(137))
		releaseHeldPods(t, c, job.Namespace)
		p = indexPod(t, c, job, 0)
		if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.SetIndexPodPhase(ctx, t, c, job, 1, corev1.PodSucceeded)
	})
}

// TestParityNonIndexedIgnoreAndCount: Ignore and Count rules against
// backoffLimit in a NonIndexed Job.
func TestParityNonIndexedIgnoreAndCount(t *testing.T) {
	runParity(t, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("ni", ns).Parallelism(2).Completions(3).BackoffLimit(1).PodFailurePolicy(
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
			builder.ExitCodeRule(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 5))
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		framework.WaitForActivePods(t, c, job, 2)
		failActivePod(t, c, job, exitCode(3))
		waitPodCount(t, c, job, 3)
		failActivePod(t, c, job, exitCode(5))
		waitPodCount(t, c, job, 4)
		failActivePod(t, c, job, exitCode(5))
	})
}

// waitPodCount waits until the Job has n pods and two of them are active.
func waitPodCount(t *testing.T, c kubernetes.Interface, job *batchv1.Job, n int) {
	t.Helper()
	framework.WaitFor(t, fmt.Sprintf("%d pods", n), func(ctx context.Context) (bool, error) {
		pods, err := framework.JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		active := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				active++
			}
		}
		return len(pods) == n && active == 2, nil
	})
}

// TestParitySuccessPolicyWithFailedPodInBackoff: success criteria met while
// a failed pod waits out its index's backoff with its finalizer.
func TestParitySuccessPolicyWithFailedPodInBackoff(t *testing.T) {
	runParityWithBackoff(t, time.Hour, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("spb", ns).Indexed().Parallelism(3).Completions(3).BackoffLimitPerIndex(2).SuccessPolicy(
			batchv1.SuccessPolicyRule{SucceededIndexes: ptrTo("0")})
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		ctx := context.Background()
		for ix := range 3 {
			waitIndexPods(t, c, job, ix, 1)
		}
		failIndexPod(t, c, job, 1, 1)
		framework.WaitFor(t, "the failed pod of index 1 to be seen", func(ctx context.Context) (bool, error) {
			j, err := c.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
			return err == nil && j.Status.Active == 2, err
		})
		framework.SetIndexPodPhase(ctx, t, c, job, 0, corev1.PodSucceeded)
	})
}

// TestParityDeadlineWithFailedPodInBackoff: activeDeadlineSeconds passes
// while a failed pod waits out its index's backoff with its finalizer.
func TestParityDeadlineWithFailedPodInBackoff(t *testing.T) {
	runParityWithBackoff(t, time.Hour, func(ns string) *builder.JobWrapper {
		return builder.MakeJob("dl", ns).Indexed().Parallelism(2).Completions(2).BackoffLimitPerIndex(2).ActiveDeadlineSeconds(3)
	}, func(t *testing.T, c kubernetes.Interface, job *batchv1.Job) {
		waitIndexPods(t, c, job, 0, 1)
		waitIndexPods(t, c, job, 1, 1)
		failIndexPod(t, c, job, 1, 1)
	})
}
