package fault

import (
	"context"
	"math/rand"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// outcome is what the fake kubelet does with one pod.
type outcome struct {
	// phase is Succeeded or Failed.
	phase corev1.PodPhase
	// exitCode is the container's exit code (0 for Succeeded).
	exitCode int32
}

// kubelet plays the node for every pod of a namespace, talking to the
// apiserver directly (never through the faulty proxy): each pending pod
// that is not being deleted finishes once, 100-400 ms after it was first
// seen, with the outcome decide picks. It records only outcomes whose
// write succeeded.
type kubelet struct {
	client kubernetes.Interface
	ns     string
	// decide picks the outcome of a pod; nil keeps the pod running.
	decide func(pod *corev1.Pod) *outcome
	rng    *rand.Rand

	// mu guards the fields below.
	mu sync.Mutex
	// seen holds the pods already scheduled to finish.
	seen map[types.UID]bool
	// finished records each pod's recorded outcome.
	finished map[types.UID]outcome
	// index records the completion index of each finished pod ("" for none).
	index map[types.UID]string
	// created counts the pods ever seen.
	created int
}

func newKubelet(client kubernetes.Interface, ns string, seed int64, decide func(*corev1.Pod) *outcome) *kubelet {
	return &kubelet{client: client, ns: ns, decide: decide, rng: rand.New(rand.NewSource(seed)),
		seen: map[types.UID]bool{}, finished: map[types.UID]outcome{}, index: map[types.UID]string{}}
}

// run plays the kubelet until ctx is done.
func (k *kubelet) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		// Every pod starts Pending, so listing only those sees every pod
		// that lives longer than a pass, and keeps big runs cheap.
		pods, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				k.mu.Lock()
				isNew := !k.seen[p.UID]
				if isNew {
					k.seen[p.UID] = true
					k.created++
				}
				k.mu.Unlock()
				if !isNew || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending {
					continue
				}
				o := k.decide(p)
				if o == nil {
					continue
				}
				k.mu.Lock()
				delay := time.Duration(100+k.rng.Intn(300)) * time.Millisecond
				k.mu.Unlock()
				wg.Go(func() { k.finish(ctx, p.DeepCopy(), *o, delay) })
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// finish writes the pod's terminal status after delay, retrying conflicts
// with a fresh read, unless the pod is deleted first.
func (k *kubelet) finish(ctx context.Context, pod *corev1.Pod, o outcome, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
		cur, err := k.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return
		}
		now := metav1.Now()
		cur.Status.Phase = o.phase
		reason := "Completed"
		if o.phase == corev1.PodFailed {
			reason = "Error"
		}
		var states []corev1.ContainerStatus
		for _, c := range cur.Spec.Containers {
			states = append(states, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: o.exitCode, Reason: reason, StartedAt: now, FinishedAt: now}}})
		}
		cur.Status.ContainerStatuses = states
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			continue
		}
		k.mu.Lock()
		k.finished[pod.UID] = o
		k.index[pod.UID] = pod.Annotations[batchv1.JobCompletionIndexAnnotation]
		k.mu.Unlock()
		return
	}
}

// tally is what the kubelet did.
type tally struct {
	// created is how many pods the kubelet saw.
	created int
	// succeeded and failed count finished pods; failedByCode counts
	// failures by exit code.
	succeeded, failed int
	failedByCode      map[int32]int
	// indexSuccesses counts successes per completion index.
	indexSuccesses map[string]int
}

// tally summarizes the kubelet's work so far.
func (k *kubelet) tally() tally {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := tally{created: k.created, failedByCode: map[int32]int{}, indexSuccesses: map[string]int{}}
	for uid, o := range k.finished {
		if o.phase == corev1.PodSucceeded {
			t.succeeded++
			if ix := k.index[uid]; ix != "" {
				t.indexSuccesses[ix]++
			}
		} else {
			t.failed++
			t.failedByCode[o.exitCode]++
		}
	}
	return t
}
