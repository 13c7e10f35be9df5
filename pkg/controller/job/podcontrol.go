package job

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/client-go/metadata"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller"
)

// Event reasons of pod writes (the same as every upstream workload controller).
const (
	// ReasonSuccessfulCreate is recorded for each pod created.
	ReasonSuccessfulCreate = "SuccessfulCreate"
	// ReasonFailedCreate is recorded for each failed pod creation.
	ReasonFailedCreate = "FailedCreate"
	// ReasonSuccessfulDelete is recorded for each pod deleted.
	ReasonSuccessfulDelete = "SuccessfulDelete"
	// ReasonFailedDelete is recorded for each failed pod deletion.
	ReasonFailedDelete = "FailedDelete"
)

// podControl writes pods on behalf of Jobs, with the controller's field
// manager and the upstream events. It also serves as the
// controller.PodControlInterface of the ControllerRefManager, which only
// patches.
type podControl struct {
	// client writes the pods.
	client kubernetes.Interface
	// recorder records the events of pod writes on the Job.
	recorder record.EventRecorder
	// meta, if set, is the metadata-only client finalizer removals use, so
	// that the apiserver answers with the pod's metadata only.
	meta metadata.Interface
	// onWrite, if set, is told of every pod a write returned.
	onWrite func(metav1.Object)
}

var _ controller.PodControlInterface = (*podControl)(nil)

// create creates one pod from tmpl, controlled by job, and returns its
// name. An empty generateName means "<job>-". The controller picks the
// random name suffix itself, as the apiserver would for generateName (which
// the pod also carries), so that a create whose outcome is unknown can be
// looked up by name (readBarrier).
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
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
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
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created pod: %v", created.Name)
	return created.Name, nil
}

// maxNameAttempts bounds the names tried for one pod, as the apiserver
// bounds its own generateName retries.
const maxNameAttempts = 8

// ownCreateWindow is how recent a pod of the Job found under a freshly
// generated name must be to be possibly this very create (clock skew
// between controller and apiserver included).
const ownCreateWindow = 10 * time.Second

// createNamed creates pod under a random name from its generateName. A name
// already taken is the birthday problem of 5-character suffixes (about four
// collisions in a Job of 10,000 pods), which the apiserver hides by retrying
// generateName; this retries with a fresh name too. The exception is a name
// taken by a pod of this Job created moments ago: client-go resends a POST
// answered with a 5xx and Retry-After, which may have been applied, so that
// pod may be this very create. Then the outcome is unknown, and the error
// says so (ambiguous), so that the next sync first reads the pod by name.
func (c *podControl) createNamed(ctx context.Context, job *batchv1.Job, pod *corev1.Pod) (*corev1.Pod, error) {
	started := time.Now()
	for attempt := 1; ; attempt++ {
		pod.Name = names.SimpleNameGenerator.GenerateName(pod.GenerateName)
		created, err := c.client.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: FieldManager})
		if !apierrors.IsAlreadyExists(err) || attempt == maxNameAttempts {
			return created, err
		}
		existing, getErr := c.client.CoreV1().Pods(job.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(getErr):
			// Deleted in between; another name is as good.
		case getErr != nil:
			return nil, &unknownOutcomeError{name: pod.Name, err: getErr}
		case mayBeOwnCreate(existing, job, started):
			return nil, &unknownOutcomeError{name: pod.Name, err: err}
		}
		klog.FromContext(ctx).V(2).Info("Pod name taken, trying another", "job", klog.KObj(job), "pod", klog.KObj(pod))
	}
}

// mayBeOwnCreate reports whether p, found under a name just generated for a
// new pod of job, may be that pod: controlled by job and created within
// ownCreateWindow of started.
func mayBeOwnCreate(p *corev1.Pod, job *batchv1.Job, started time.Time) bool {
	ref := metav1.GetControllerOfNoCopy(p)
	return ref != nil && ref.UID == job.UID && !p.CreationTimestamp.Time.Before(started.Add(-ownCreateWindow))
}

// unknownOutcomeError is a pod create that may or may not have created the
// pod it names.
type unknownOutcomeError struct {
	name string
	err  error
}

func (e *unknownOutcomeError) Error() string {
	return fmt.Sprintf("pod %s may have been created by this request: %v", e.name, e.err)
}

func (e *unknownOutcomeError) Unwrap() error { return e.err }

// delete deletes the named pod of job. A pod already gone is reported as
// NotFound without an event.
func (c *podControl) delete(ctx context.Context, job *batchv1.Job, name string) error {
	klog.FromContext(ctx).V(2).Info("Deleting pod", "job", klog.KObj(job), "pod", klog.KRef(job.Namespace, name))
	err := c.client.CoreV1().Pods(job.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		c.recorder.Eventf(job, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting: %v", err)
		return fmt.Errorf("deleting pod %s/%s: %w", job.Namespace, name, err)
	}
	c.recorder.Eventf(job, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted pod: %v", name)
	return nil
}

// removeFinalizer applies patch, which removes the tracking finalizer, to
// the named pod. With a metadata client the response is the pod's metadata
// alone: the controller only needs its resourceVersion, and neither side
// pays for encoding and decoding the whole pod.
func (c *podControl) removeFinalizer(ctx context.Context, namespace, name string, patch []byte) error {
	if c.meta == nil {
		return c.PatchPod(ctx, namespace, name, patch)
	}
	m, err := c.meta.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(namespace).
		Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err == nil && c.onWrite != nil {
		c.onWrite(m)
	}
	return err
}

// PatchPod applies a strategic merge patch to a pod.
func (c *podControl) PatchPod(ctx context.Context, namespace, name string, data []byte) error {
	pod, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
	if err == nil && c.onWrite != nil {
		c.onWrite(pod)
	}
	return err
}

// CreatePods is not used by the ControllerRefManager.
func (c *podControl) CreatePods(context.Context, string, *corev1.PodTemplateSpec, runtime.Object, *metav1.OwnerReference) error {
	return errors.New("podControl.CreatePods is not supported")
}

// CreatePodsWithGenerateName is not used by the ControllerRefManager.
func (c *podControl) CreatePodsWithGenerateName(context.Context, string, *corev1.PodTemplateSpec, runtime.Object, *metav1.OwnerReference, string) error {
	return errors.New("podControl.CreatePodsWithGenerateName is not supported")
}

// DeletePod is not used by the ControllerRefManager.
func (c *podControl) DeletePod(context.Context, string, string, runtime.Object) error {
	return errors.New("podControl.DeletePod is not supported")
}

// copyMap returns a copy of m (nil for an empty map).
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
