package ttlafterfinished

import (
	"context"
	"jobkeeper.dev/jobkeeper/pkg/manager"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/deploy/crds"
	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// fieldManager is used by the tests' own writes.
const fieldManager = "jobkeeper-ttl-test"

var (
	startOnce sync.Once
	startErr  error
)

// startController installs the CRDs and starts one controller for the whole
// package (policies are cluster-scoped, so several controllers would fight
// over their status). Tests isolate themselves with their own namespace and
// labels.
func startController(t testing.TB) {
	t.Helper()
	startOnce.Do(func() {
		cfg := framework.Config()
		cfg.QPS, cfg.Burst = 500, 1000
		ext, err := apiextensionsclientset.NewForConfig(cfg)
		if err != nil {
			startErr = err
			return
		}
		if startErr = crds.Install(context.Background(), ext); startErr != nil {
			return
		}
		client := kubernetes.NewForConfigOrDie(cfg)
		dyn := dynamic.NewForConfigOrDie(cfg)
		// A short retry so that new kinds show up quickly. The status
		// periods are left as shipped: TestPolicyStatusCountsDeletionPromptly
		// checks how soon a deletion shows, which a short periodic refresh
		// would hide.
		ttlafterfinished.UnreadyPolicyRetryPeriod = 500 * time.Millisecond
		ctx := context.Background()
		// As the manager wires it: the Job pods from an informer of the
		// pods with the Job label only; the controller watches the rest.
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform))
		podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = batchv1.ControllerUidLabel }))
		c, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{JobPods: podFactory.Core().V1().Pods(), PodTransform: manager.CacheTransform},
			ttlafterfinished.Clients{Client: client, Dynamic: dyn}, factory)
		if err != nil {
			startErr = err
			return
		}
		factory.Start(ctx.Done())
		podFactory.Start(ctx.Done())
		go c.Run(ctx, 5)
	})
	if startErr != nil {
		t.Fatalf("starting controller: %v", startErr)
	}
}

// env is what most tests need.
type env struct {
	ctx    context.Context
	ns     string
	client kubernetes.Interface
	dyn    dynamic.Interface
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	startController(t)
	return &env{
		ctx:    context.Background(),
		ns:     framework.CreateNamespace(t),
		client: framework.Client(t),
		dyn:    dynamic.NewForConfigOrDie(framework.Config()),
	}
}

// createJob creates a Job as stored.
func (e *env) createJob(t *testing.T, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	job.Namespace = e.ns
	got, err := e.client.BatchV1().Jobs(e.ns).Create(e.ctx, job, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatalf("creating Job: %v", err)
	}
	return got
}

// finishJob writes the status a Job controller writes when the Job
// finishes with condition ctype (Complete or Failed) at the given time.
func (e *env) finishJob(t *testing.T, job *batchv1.Job, ctype batchv1.JobConditionType, at time.Time) *batchv1.Job {
	t.Helper()
	j, err := e.client.BatchV1().Jobs(e.ns).Get(e.ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := metav1.NewTime(at)
	start := metav1.NewTime(at.Add(-time.Second))
	j.Status.StartTime = &start
	j.Status.Ready, j.Status.Terminating = ptr.To[int32](0), ptr.To[int32](0)
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, LastProbeTime: ts, LastTransitionTime: ts}
	}
	switch ctype {
	case batchv1.JobComplete:
		j.Status.Succeeded = 1
		j.Status.CompletionTime = &ts
		j.Status.Conditions = append(j.Status.Conditions, cond(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached), cond(batchv1.JobComplete, batchv1.JobReasonCompletionsReached))
	case batchv1.JobFailed:
		j.Status.Failed = 1
		j.Status.Conditions = append(j.Status.Conditions, cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded), cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded))
	case batchv1.JobFailureTarget:
		j.Status.Conditions = append(j.Status.Conditions, cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded))
	}
	got, err := e.client.BatchV1().Jobs(e.ns).UpdateStatus(e.ctx, j, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatalf("finishing Job %s: %v", job.Name, err)
	}
	return got
}

// waitJobGone waits until no Job with that name and UID exists.
func (e *env) waitJobGone(t *testing.T, job *batchv1.Job) time.Time {
	t.Helper()
	framework.WaitFor(t, "Job "+job.Name+" to be deleted", func(ctx context.Context) (bool, error) {
		j, err := e.client.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && j.UID != job.UID, err
	})
	return time.Now()
}

// jobExists reports whether the Job (same UID) exists and is not being deleted.
func (e *env) jobExists(t *testing.T, job *batchv1.Job) bool {
	t.Helper()
	j, err := e.client.BatchV1().Jobs(e.ns).Get(e.ctx, job.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return j.UID == job.UID && j.DeletionTimestamp == nil
}

// sentinel creates a Job with TTL 0 that finished now and waits until the
// controller deleted it: after that, the controller has seen and processed
// everything the test created before.
func (e *env) sentinel(t *testing.T) {
	t.Helper()
	s := e.createJob(t, builder.MakeJob("sentinel", e.ns).TTLSecondsAfterFinished(0).Obj())
	e.finishJob(t, s, batchv1.JobComplete, time.Now())
	e.waitJobGone(t, s)
}

// createPolicy creates a TTLPolicy and deletes it when the test ends.
func (e *env) createPolicy(t *testing.T, p *v1alpha1.TTLPolicy) {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(v1alpha1.TTLPolicyKind)
	api := e.dyn.Resource(v1alpha1.TTLPolicyResource)
	if _, err := api.Create(e.ctx, u, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		t.Fatalf("creating TTLPolicy %s: %v", p.Name, err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
}

// getPolicy reads a TTLPolicy.
func (e *env) getPolicy(ctx context.Context, name string) (*v1alpha1.TTLPolicy, error) {
	u, err := e.dyn.Resource(v1alpha1.TTLPolicyResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	p := &v1alpha1.TTLPolicy{}
	return p, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p)
}

// ownPod makes an orphan-protected pod owned by the Job, as the Job
// controller would, so foreground deletion has something to cascade to.
func (e *env) ownPod(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	p := builder.MakePod(job.Name+"-pod", e.ns).Obj()
	p.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	got, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// podGone reports whether no pod with that name and UID exists.
func (e *env) podGone(ctx context.Context, name string, uid types.UID) (bool, error) {
	p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return err == nil && p.UID != uid, err
}
