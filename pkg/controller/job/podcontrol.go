package job

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	// contentType is the encoding client was configured with; creates and
	// patches ask for the pod's metadata only in it (podmeta.go).
	contentType string
	// onWrite, if set, is told of every pod a write returned.
	onWrite func(metav1.Object)
}

var _ controller.PodControlInterface = (*podControl)(nil)

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
// the named pod.
func (c *podControl) removeFinalizer(ctx context.Context, namespace, name string, patch []byte) error {
	return c.PatchPod(ctx, namespace, name, patch)
}

// releaseOrphan removes the tracking finalizer from pod, a pod no Job
// counts any more, provided it is still at the resourceVersion the caller
// decided from (a conflict otherwise). The write is not reported to
// onWrite: no sync of a Job waits for it, and a record of it would never
// be cleared.
func (c *podControl) releaseOrphan(ctx context.Context, pod *corev1.Pod) error {
	patch := removeFinalizerPatchAt(pod)
	if patch == nil {
		return nil
	}
	_, err := c.patch(ctx, pod.Namespace, pod.Name, patch)
	return err
}

// PatchPod applies a strategic merge patch to a pod.
func (c *podControl) PatchPod(ctx context.Context, namespace, name string, data []byte) error {
	pod, err := c.patch(ctx, namespace, name, data)
	if err == nil && c.onWrite != nil {
		c.onWrite(pod)
	}
	return err
}

// patch applies a strategic merge patch to the named pod and returns the
// pod as the apiserver answered: its metadata only, unless client is a
// fake clientset (no REST client), whose typed client returns the pod.
func (c *podControl) patch(ctx context.Context, namespace, name string, data []byte) (metav1.Object, error) {
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	if rc := podsRESTClient(c.client); rc != nil {
		m, err := patchPodMeta(ctx, rc, c.contentType, namespace, name, data, opts)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	pod, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, data, opts)
	if err != nil {
		return nil, err
	}
	return pod, nil
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
