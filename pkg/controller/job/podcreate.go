package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
)

// Creating a pod so that its outcome is always known or known to be
// unknown. The controller picks each pod's name itself (a random suffix
// after generateName, as the apiserver would), and sends each create once:
// client-go would resend a POST answered with a 5xx and Retry-After, which
// may have been applied the first time, and the resend's AlreadyExists
// would then hide the pod the first attempt made. So a create either
// succeeds, is refused (4xx: nothing was created), or fails in a way that
// may have created the pod under the name it carried (ambiguous: the next
// sync reads that name back, readBarrier). A name already taken can only
// be another pod's, and a fresh name is tried.

// maxNameAttempts bounds the names tried for one pod, as the apiserver
// bounds its own generateName retries.
const maxNameAttempts = 8

// Throttled creates (429: refused before anything was stored) are resent,
// as client-go would, at most maxThrottledResends times, after the delay
// the apiserver asks for (1 s if it names none), capped at maxThrottleWait.
const (
	maxThrottledResends = 10
	maxThrottleWait     = 10 * time.Second
)

// create creates one pod from tmpl, controlled by job (and owned by the
// template's owners too: the Job's PodGroup), and returns its name. An empty generateName means "<job>-". On an error whose outcome is
// unknown, the name returned is the one the pod may exist under.
func (c *podControl) create(ctx context.Context, job *batchv1.Job, tmpl *corev1.PodTemplateSpec, generateName string) (string, error) {
	if generateName == "" {
		generateName = job.Name + "-"
		if len(validation.IsDNS1123Subdomain(generateName+"abcde")) != 0 {
			generateName = job.Name
		}
	}
	if len(tmpl.Labels) == 0 {
		return "", errors.New("unable to create pods, no labels")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    generateName,
			Labels:          copyMap(tmpl.Labels),
			Annotations:     copyMap(tmpl.Annotations),
			Finalizers:      append([]string(nil), tmpl.Finalizers...),
			OwnerReferences: append([]metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}, tmpl.OwnerReferences...),
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	created, err := c.createNamed(ctx, job, pod)
	if err == nil && c.onWrite != nil {
		c.onWrite(created)
	}
	if err != nil {
		if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			c.recorder.Eventf(job, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating: %v", err)
		}
		return pod.Name, err
	}
	klog.FromContext(ctx).V(4).Info("Created pod", "job", klog.KObj(job), "pod", klog.KObj(created))
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.GetName())
	return created.GetName(), nil
}

// createNamed creates pod under a random name from its generateName. A name
// already taken is the birthday problem of 5-character suffixes (about four
// collisions in a Job of 10,000 pods), which the apiserver hides by retrying
// generateName; this retries with a fresh name too. Since no create is
// resent, the pod holding the name is never this create's own.
func (c *podControl) createNamed(ctx context.Context, job *batchv1.Job, pod *corev1.Pod) (metav1.Object, error) {
	for attempt := 1; ; attempt++ {
		pod.Name = names.SimpleNameGenerator.GenerateName(pod.GenerateName)
		created, err := c.createOnce(ctx, job.Namespace, pod)
		if ambiguous(err) {
			return nil, &unknownOutcomeError{name: pod.Name, err: err}
		}
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) || attempt == maxNameAttempts {
			return nil, err
		}
		klog.FromContext(ctx).V(2).Info("Pod name taken, trying another", "job", klog.KObj(job), "pod", klog.KObj(pod))
	}
}

// createOnce sends one create of pod: never resent after an answer that
// may mean it was applied, resent only after a throttling refusal (429).
// It returns the created pod's metadata (podmeta.go); with a client that
// has no REST client of its own (a fake clientset in unit tests), the
// typed client is used and returns the whole pod.
func (c *podControl) createOnce(ctx context.Context, namespace string, pod *corev1.Pod) (metav1.Object, error) {
	opts := metav1.CreateOptions{FieldManager: FieldManager}
	rc := podsRESTClient(c.client)
	if rc == nil {
		created, err := c.client.CoreV1().Pods(namespace).Create(ctx, pod, opts)
		if err != nil {
			return nil, err
		}
		return created, nil
	}
	for resend := 0; ; resend++ {
		created, err := createPodMeta(ctx, rc, c.contentType, namespace, pod, opts)
		if err == nil {
			return created, nil
		}
		if !apierrors.IsTooManyRequests(err) || resend == maxThrottledResends {
			return nil, err
		}
		wait := time.Second
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			wait = min(time.Duration(s)*time.Second, maxThrottleWait)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// unknownOutcomeError is a pod create that may or may not have created the
// pod it names.
type unknownOutcomeError struct {
	// name is the name the pod may exist under.
	name string
	// err is the error of the create.
	err error
}

func (e *unknownOutcomeError) Error() string {
	return fmt.Sprintf("pod %s may have been created by this request: %v", e.name, e.err)
}

func (e *unknownOutcomeError) Unwrap() error { return e.err }
