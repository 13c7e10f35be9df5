package framework

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// FieldManager is the field manager of the writes the helpers make as the kubelet.
const FieldManager = "jobkeeper-test-kubelet"

// JobPods lists the pods that the Job controls (by controller owner
// reference), sorted by name.
func JobPods(ctx context.Context, c kubernetes.Interface, job *batchv1.Job) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{}
	if job.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
		if err != nil {
			return nil, err
		}
		opts.LabelSelector = sel.String()
	} else {
		opts.LabelSelector = labels.Set{batchv1.JobNameLabel: job.Name}.String()
	}
	list, err := c.CoreV1().Pods(job.Namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing pods of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == job.UID {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// isActive reports whether a pod is running as far as the Job is concerned:
// not terminal and not being deleted.
func isActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// SetPodPhase writes the pod's status as a kubelet would for phase: for
// Running, a running container and Ready; for Succeeded or Failed, a
// terminated container with exit code 0 or 1 and finishedAt now. When the
// pod changed since it was read (a controller adopted it, added its
// finalizer), it reads the pod again and retries, as a kubelet does: only
// its status is written.
func SetPodPhase(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) error {
	err := setPodPhase(ctx, c, pod, phase)
	for attempt := 0; apierrors.IsConflict(err) && attempt < 5; attempt++ {
		fresh, getErr := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if getErr != nil {
			return fmt.Errorf("setting pod %s/%s to %s: %w", pod.Namespace, pod.Name, phase, getErr)
		}
		if fresh.UID != pod.UID {
			return err
		}
		err = setPodPhase(ctx, c, fresh, phase)
	}
	return err
}

// SetPodPhaseAt is one attempt of SetPodPhase, against pod's
// resourceVersion: a Conflict if the pod changed since pod was read (the
// controller removed its finalizer or deleted it, say), which a test
// kubelet that must only finish pods the controller still tracks uses.
func SetPodPhaseAt(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) error {
	return setPodPhase(ctx, c, pod, phase)
}

// setPodPhase is one attempt of SetPodPhase, against pod's resourceVersion.
func setPodPhase(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) error {
	p := pod.DeepCopy()
	now := metav1.Now()
	p.Status.Phase = phase
	var states []corev1.ContainerStatus
	for _, ctr := range p.Spec.Containers {
		st := corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, ImageID: ctr.Image}
		switch phase {
		case corev1.PodRunning:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
			st.Ready = true
			st.Started = ptrTo(true)
		case corev1.PodSucceeded, corev1.PodFailed:
			code, reason := int32(0), "Completed"
			if phase == corev1.PodFailed {
				code, reason = 1, "Error"
			}
			st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now}
			st.Started = ptrTo(false)
		default:
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		states = append(states, st)
	}
	p.Status.ContainerStatuses = states
	ready := corev1.ConditionFalse
	if phase == corev1.PodRunning {
		ready = corev1.ConditionTrue
	}
	setCondition(p, corev1.PodReady, ready, now)
	_, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("setting pod %s/%s to %s: %w", p.Namespace, p.Name, phase, err)
	}
	return nil
}

// SetJobPodsPhase moves n active pods of the Job to phase and returns how
// many it moved. It fails the test if there are fewer than n active pods or
// a write fails.
func SetJobPodsPhase(ctx context.Context, t testing.TB, c kubernetes.Interface, job *batchv1.Job, phase corev1.PodPhase, n int) int {
	t.Helper()
	pods, err := JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for i := range pods {
		if done == n {
			break
		}
		p := &pods[i]
		if !isActive(p) || p.Status.Phase == phase {
			continue
		}
		if err := SetPodPhase(ctx, c, p, phase); err != nil {
			t.Fatal(err)
		}
		done++
	}
	if done < n {
		t.Fatalf("Job %s/%s: wanted to set %d pods to %s, found only %d eligible", job.Namespace, job.Name, n, phase, done)
	}
	return done
}

// SetJobPodsReady marks n active pods of the Job that are not Running yet
// Running and Ready.
func SetJobPodsReady(ctx context.Context, t testing.TB, c kubernetes.Interface, job *batchv1.Job, n int) int {
	t.Helper()
	return SetJobPodsPhase(ctx, t, c, job, corev1.PodRunning, n)
}

// SetIndexPodPhase moves the active pod of an Indexed Job's index to phase.
func SetIndexPodPhase(ctx context.Context, t testing.TB, c kubernetes.Interface, job *batchv1.Job, index int, phase corev1.PodPhase) {
	t.Helper()
	pods, err := JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(index)
	for i := range pods {
		p := &pods[i]
		if isActive(p) && p.Annotations[batchv1.JobCompletionIndexAnnotation] == want {
			if err := SetPodPhase(ctx, c, p, phase); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("Job %s/%s has no active pod for index %d", job.Namespace, job.Name, index)
}

// DeleteJobPods deletes n active pods of the Job (as a user or eviction
// would) and returns their names.
func DeleteJobPods(ctx context.Context, t testing.TB, c kubernetes.Interface, job *batchv1.Job, n int) []string {
	t.Helper()
	pods, err := JobPods(ctx, c, job)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range pods {
		if len(names) == n {
			break
		}
		if !isActive(&pods[i]) {
			continue
		}
		if err := c.CoreV1().Pods(job.Namespace).Delete(ctx, pods[i].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting pod %s: %v", pods[i].Name, err)
		}
		names = append(names, pods[i].Name)
	}
	if len(names) < n {
		t.Fatalf("Job %s/%s: wanted to delete %d pods, found only %d active", job.Namespace, job.Name, n, len(names))
	}
	return names
}

// WaitForActivePods waits until the Job has exactly n active pods and returns them.
func WaitForActivePods(t testing.TB, c kubernetes.Interface, job *batchv1.Job, n int) []corev1.Pod {
	t.Helper()
	var active []corev1.Pod
	WaitFor(t, fmt.Sprintf("Job %s/%s to have %d active pods", job.Namespace, job.Name, n), func(ctx context.Context) (bool, error) {
		pods, err := JobPods(ctx, c, job)
		if err != nil {
			return false, err
		}
		active = active[:0]
		for i := range pods {
			if isActive(&pods[i]) {
				active = append(active, pods[i])
			}
		}
		return len(active) == n, nil
	})
	return active
}

func setCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus, now metav1.Time) {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			if p.Status.Conditions[i].Status != s {
				p.Status.Conditions[i].Status = s
				p.Status.Conditions[i].LastTransitionTime = now
			}
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
}

func ptrTo[T any](v T) *T { return &v }

// sinceStart is used in failure messages.
func sinceStart(start time.Time) string { return time.Since(start).Round(time.Millisecond).String() }
