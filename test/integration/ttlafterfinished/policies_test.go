package ttlafterfinished

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"jobkeeper.dev/jobkeeper/pkg/apis/jobkeeper/v1alpha1"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
	"jobkeeper.dev/jobkeeper/test/manifests"
)

// Test kinds: Widgets report their outcome with conditions, Gizmos with a
// phase field and a finish timestamp.
var (
	widgetGVR = schema.GroupVersionResource{Group: "ttl.example.com", Version: "v1", Resource: "widgets"}
	gizmoGVR  = schema.GroupVersionResource{Group: "ttl.example.com", Version: "v1", Resource: "gizmos"}
)

var testCRDsOnce sync.Once

// installTestCRDs creates the Widget and Gizmo CRDs once per package.
func installTestCRDs(t *testing.T) {
	t.Helper()
	var err error
	testCRDsOnce.Do(func() {
		ext := apiextensionsclientset.NewForConfigOrDie(framework.Config())
		// Sprockets have a strict schema (status.phase and status.endTime
		// only), so the controller can check policy field paths.
		strict := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object"},
			"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"phase":   {Type: "string"},
				"endTime": {Type: "string", Format: "date-time"},
			}},
		}}
		loose := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}
		for _, k := range []struct {
			plural, kind string
			schema       *apiextensionsv1.JSONSchemaProps
		}{{"widgets", "Widget", loose}, {"gizmos", "Gizmo", loose}, {"sprockets", "Sprocket", strict}} {
			crd := &apiextensionsv1.CustomResourceDefinition{
				ObjectMeta: metav1.ObjectMeta{Name: k.plural + ".ttl.example.com"},
				Spec: apiextensionsv1.CustomResourceDefinitionSpec{
					Group: "ttl.example.com",
					Scope: apiextensionsv1.NamespaceScoped,
					Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: k.plural, Kind: k.kind, ListKind: k.kind + "List", Singular: strings.ToLower(k.kind)},
					Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
						Name: "v1", Served: true, Storage: true,
						Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: k.schema},
					}},
				},
			}
			if err = manifests.InstallCRD(context.Background(), ext, crd, framework.Timeout); err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatalf("installing test CRDs: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// createObject creates a custom object in the test namespace.
func (e *env) createObject(t *testing.T, gvr schema.GroupVersionResource, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	u.SetNamespace(e.ns)
	got, err := e.dyn.Resource(gvr).Namespace(e.ns).Create(e.ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatalf("creating %s %s: %v", gvr.Resource, u.GetName(), err)
	}
	return got
}

// objectExists reports whether the custom object exists.
func (e *env) objectExists(ctx context.Context, gvr schema.GroupVersionResource, name string) (bool, error) {
	_, err := e.dyn.Resource(gvr).Namespace(e.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// waitPolicy waits until the policy's status satisfies ok.
func (e *env) waitPolicy(t *testing.T, name, what string, ok func(*v1alpha1.TTLPolicy) bool) {
	t.Helper()
	var last *v1alpha1.TTLPolicy
	err := wait.PollUntilContextTimeout(e.ctx, framework.Interval, framework.Timeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.getPolicy(ctx, name)
		if err != nil {
			return false, err
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		t.Fatalf("TTLPolicy %s %s: %v; last status %+v", name, what, err, status)
	}
}

func readyIs(p *v1alpha1.TTLPolicy, status metav1.ConditionStatus, reason string) bool {
	c := apimeta.FindStatusCondition(p.Status.Conditions, v1alpha1.PolicyReady)
	return c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == p.Generation
}

// hasEvent reports whether an event with reason exists for the named object.
func (e *env) hasEvent(ctx context.Context, name, reason string) (bool, error) {
	evs, err := e.client.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return false, err
	}
	for _, ev := range evs.Items {
		if ev.Reason == reason {
			return true, nil
		}
	}
	return false, nil
}

func TestPodTTL(t *testing.T) {
	e := setup(t)
	job := e.createJob(t, builder.MakeJob("j", e.ns).Obj())
	plain := builder.MakePod("plain", e.ns).Obj()
	jobPod := builder.MakePod("job-pod", e.ns).Annotation(v1alpha1.TTLAnnotation, "0").OwnedByJob(job).Obj()
	annotated := builder.MakePod("annotated", e.ns).Annotation(v1alpha1.TTLAnnotation, "1").Obj()
	var created []*corev1.Pod
	// The pods' finish times are stored to the second: a lower bound of the
	// annotated pod's is the clock, truncated, before its phase is set (a
	// reading after it may fall in the next second, and its TTL then seem
	// to end early).
	var finished time.Time
	for _, p := range []*corev1.Pod{plain, jobPod, annotated} {
		finished = time.Now().Truncate(time.Second)
		got, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.SetPodPhase(e.ctx, e.client, got, corev1.PodSucceeded); err != nil {
			t.Fatal(err)
		}
		created = append(created, got)
	}
	framework.WaitFor(t, "annotated pod deleted", func(ctx context.Context) (bool, error) {
		return e.podGone(ctx, annotated.Name, created[2].UID)
	})
	if d := time.Since(finished); d < time.Second {
		t.Errorf("pod deleted %v after it finished, want at least 1s", d)
	}
	e.sentinel(t)
	for _, p := range created[:2] {
		if gone, err := e.podGone(e.ctx, p.Name, p.UID); err != nil || gone {
			t.Errorf("pod %s was deleted (err %v)", p.Name, err)
		}
	}
}

func TestCustomResourcePolicies(t *testing.T) {
	e := setup(t)
	installTestCRDs(t)
	long := int32(3600)
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-widgets").Target("ttl.example.com/v1", "Widget").
		Selector("test", e.ns).Conditions([]string{"Done"}, []string{"Broken"}).TTLAfterSuccess(1).TTLAfterFailure(long).DeletionEvents().Obj())
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-gizmos").Target("ttl.example.com/v1", "Gizmo").
		Selector("test", e.ns).Phase("status.phase", []string{"Succeeded"}, []string{"Failed", "Error"}).
		FinishTime("status.endTime").TTLAfterSuccess(long).TTLAfterFailure(1).Obj())

	now := metav1.Now()
	w := func(name string) *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("ttl.example.com/v1", "Widget", name, e.ns).Label("test", e.ns)
	}
	g := func(name string) *builder.CustomObjectWrapper {
		return builder.MakeCustomObject("ttl.example.com/v1", "Gizmo", name, e.ns).Label("test", e.ns)
	}
	e.createObject(t, widgetGVR, w("done").Condition("Done", "True", now).Obj())
	e.createObject(t, widgetGVR, w("broken").Condition("Broken", "True", now).Obj())
	e.createObject(t, widgetGVR, w("running").Condition("Done", "False", now).Obj())
	e.createObject(t, gizmoGVR, g("succeeded").Field("status.phase", "Succeeded").TimeField("status.endTime", now).Obj())
	e.createObject(t, gizmoGVR, g("error").Field("status.phase", "Error").TimeField("status.endTime", now).Obj())
	e.createObject(t, gizmoGVR, g("running").Field("status.phase", "Running").Obj())

	framework.WaitFor(t, "succeeded Widget and failed Gizmo deleted", func(ctx context.Context) (bool, error) {
		a, err1 := e.objectExists(ctx, widgetGVR, "done")
		b, err2 := e.objectExists(ctx, gizmoGVR, "error")
		if err1 != nil || err2 != nil {
			return false, err1
		}
		return !a && !b, nil
	})
	e.waitPolicy(t, e.ns+"-widgets", "counts its deletion", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) && p.Status.Deleted == 1 && p.Status.Matched == 2
	})
	e.waitPolicy(t, e.ns+"-gizmos", "counts its deletion", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) && p.Status.Deleted == 1 && p.Status.Matched == 2
	})
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{widgetGVR, "broken"}, {widgetGVR, "running"}, {gizmoGVR, "succeeded"}, {gizmoGVR, "running"}} {
		if ok, err := e.objectExists(e.ctx, o.gvr, o.name); err != nil || !ok {
			t.Errorf("%s %s was deleted (err %v)", o.gvr.Resource, o.name, err)
		}
	}
	// The widgets policy asks for deletion events; the gizmos policy does
	// not, and the controller's default is none (as upstream).
	framework.WaitFor(t, "TTLExpired event", func(ctx context.Context) (bool, error) {
		return e.hasEvent(ctx, "done", ttlafterfinished.ReasonDeleted)
	})
	if ok, err := e.hasEvent(e.ctx, "error", ttlafterfinished.ReasonDeleted); err != nil || ok {
		t.Errorf("a TTLExpired event was recorded for a deletion by a policy without deletionEvents (err %v)", err)
	}
}

func TestPolicyPrecedence(t *testing.T) {
	e := setup(t)
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-short").Selector("test", e.ns).TTLAfterSuccess(0).Obj())
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-long").Selector("test", e.ns).Selector("keep", "long").TTLAfterSuccess(3600).Obj())
	e.waitPolicy(t, e.ns+"-long", "ready", func(p *v1alpha1.TTLPolicy) bool { return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) })

	both := e.createJob(t, builder.MakeJob("both", e.ns).Label("test", e.ns).Label("keep", "long").Obj())
	shortOnly := e.createJob(t, builder.MakeJob("short-only", e.ns).Label("test", e.ns).Obj())
	own := e.createJob(t, builder.MakeJob("own", e.ns).Label("test", e.ns).Label("keep", "long").TTLSecondsAfterFinished(0).Obj())
	for _, j := range []*batchv1.Job{both, shortOnly, own} {
		e.finishJob(t, j, batchv1.JobComplete, time.Now())
	}
	e.waitJobGone(t, shortOnly) // only the short policy matches
	e.waitJobGone(t, own)       // its own TTL wins over the long policy
	e.sentinel(t)
	if !e.jobExists(t, both) {
		t.Error("Job matched by both policies was deleted: the longest TTL must win")
	}
}

func TestInvalidPolicies(t *testing.T) {
	e := setup(t)
	installTestCRDs(t)
	// Rejected by the apiserver, with a message naming the field.
	rejected := map[string]struct {
		policy *v1alpha1.TTLPolicy
		field  string
	}{
		"nothing to do":     {builder.MakeTTLPolicy(e.ns + "-a").Obj(), "spec.ttlSecondsAfterSuccess"},
		"negative TTL":      {builder.MakeTTLPolicy(e.ns + "-b").TTLAfterSuccess(-1).Obj(), "spec.ttlSecondsAfterSuccess"},
		"bad apiVersion":    {builder.MakeTTLPolicy(e.ns+"-c").Target("Batch/V1!", "Job").TTLAfterSuccess(1).Obj(), "spec.target.apiVersion"},
		"bad kind":          {builder.MakeTTLPolicy(e.ns+"-d").Target("batch/v1", "job").TTLAfterSuccess(1).Obj(), "spec.target.kind"},
		"no outcome":        {builder.MakeTTLPolicy(e.ns+"-e").Target("ttl.example.com/v1", "Widget").TTLAfterSuccess(1).Obj(), "spec.outcome"},
		"empty outcome":     {builder.MakeTTLPolicy(e.ns+"-f").Target("ttl.example.com/v1", "Gizmo").FinishTime("status.t").TTLAfterSuccess(1).Obj(), "spec.outcome"},
		"matcher with both": {builder.MakeTTLPolicy(e.ns+"-g").Target("ttl.example.com/v1", "Gizmo").Succeeded(v1alpha1.Matcher{Condition: &v1alpha1.ConditionMatcher{Type: "Done"}, Field: &v1alpha1.FieldMatcher{Path: "status.phase", Values: []string{"Done"}}}).TTLAfterSuccess(1).Obj(), "spec.outcome.succeeded[0]"},
		"bad field path":    {builder.MakeTTLPolicy(e.ns+"-h").Target("ttl.example.com/v1", "Gizmo").Phase("status[0]", []string{"Done"}, nil).FinishTime("status.t").TTLAfterSuccess(1).Obj(), "spec.outcome.succeeded[0].field.path"},
		"leading dot":       {builder.MakeTTLPolicy(e.ns+"-h2").Target("ttl.example.com/v1", "Gizmo").Phase("status.phase", []string{"Done"}, nil).FinishTime(".status.t").TTLAfterSuccess(1).Obj(), "remove the leading '.'"},
		"condition status":  {builder.MakeTTLPolicy(e.ns+"-h3").Target("ttl.example.com/v1", "Gizmo").Succeeded(builder.Cond("Done", "Yes")).TTLAfterSuccess(1).Obj(), "spec.outcome.succeeded[0].condition.status"},
		"bad propagation":   {builder.MakeTTLPolicy(e.ns + "-i").TTLAfterSuccess(1).Propagation("Sideways").Obj(), "spec.propagationPolicy"},
		"forbidden kind":    {builder.MakeTTLPolicy(e.ns+"-j").Target("v1", "Namespace").Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj(), "spec.target.kind"},
		"jobPods, not Pods": {builder.MakeTTLPolicy(e.ns + "-k").TTLAfterSuccess(1).IncludeJobPods().Obj(), "spec.includeJobPods"},
		"keepLast, no counts": {func() *v1alpha1.TTLPolicy {
			p := builder.MakeTTLPolicy(e.ns + "-l").Obj()
			p.Spec.KeepLast = &v1alpha1.KeepLast{}
			return p
		}(), "spec.keepLast"},
		"groupBy, bad label": {builder.MakeTTLPolicy(e.ns+"-m").KeepLast(1, 1).GroupByLabel("not a label").Obj(), "spec.keepLast.groupBy.labelKey"},
	}
	for name, tc := range rejected {
		t.Run(name, func(t *testing.T) {
			u := builder.TTLPolicyWrapper{TTLPolicy: *tc.policy}
			_, err := e.dyn.Resource(v1alpha1.TTLPolicyResource).Create(e.ctx, u.Unstructured(), metav1.CreateOptions{FieldManager: fieldManager})
			if err == nil {
				_ = e.dyn.Resource(v1alpha1.TTLPolicyResource).Delete(e.ctx, tc.policy.Name, metav1.DeleteOptions{})
				t.Fatal("policy accepted")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}

	t.Run("TTL beyond int32", func(t *testing.T) {
		u := builder.MakeTTLPolicy(e.ns + "-b2").TTLAfterSuccess(1).Unstructured()
		if err := unstructured.SetNestedField(u.Object, int64(1)<<33, "spec", "ttlSecondsAfterFailure"); err != nil {
			t.Fatal(err)
		}
		_, err := e.dyn.Resource(v1alpha1.TTLPolicyResource).Create(e.ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			_ = e.dyn.Resource(v1alpha1.TTLPolicyResource).Delete(e.ctx, u.GetName(), metav1.DeleteOptions{})
			t.Fatal("policy accepted")
		}
		if !strings.Contains(err.Error(), "spec.ttlSecondsAfterFailure") {
			t.Errorf("error %q does not name spec.ttlSecondsAfterFailure", err)
		}
	})

	// Accepted, but only the controller can tell they are unusable.
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-unknown").Target("ttl.example.com/v1", "Nonexistent").
		Conditions([]string{"Done"}, nil).TTLAfterSuccess(1).Obj())
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-cluster").Target("v1", "PersistentVolume").
		Phase("status.phase", []string{"Released"}, nil).FinishTime("status.lastPhaseTransitionTime").TTLAfterSuccess(1).Obj())
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-badpath").Target("ttl.example.com/v1", "Sprocket").
		Phase("status.state", []string{"Done"}, nil).FinishTime("status.endTime").TTLAfterSuccess(1).Obj())
	e.createPolicy(t, builder.MakeTTLPolicy(e.ns+"-goodpath").Target("ttl.example.com/v1", "Sprocket").
		Phase("status.phase", []string{"Done"}, nil).FinishTime("status.endTime").TTLAfterSuccess(1).Obj())
	e.waitPolicy(t, e.ns+"-badpath", "FieldPathNotFound", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionFalse, v1alpha1.ReasonFieldPathNotFound)
	})
	e.waitPolicy(t, e.ns+"-goodpath", "Ready", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady)
	})
	e.waitPolicy(t, e.ns+"-unknown", "UnknownKind", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionFalse, v1alpha1.ReasonUnknownKind)
	})
	e.waitPolicy(t, e.ns+"-cluster", "NotNamespaced", func(p *v1alpha1.TTLPolicy) bool {
		return readyIs(p, metav1.ConditionFalse, v1alpha1.ReasonNotNamespaced)
	})
	// Everything else keeps working.
	e.sentinel(t)
}

func TestDryRun(t *testing.T) {
	e := setup(t)
	name := e.ns + "-dry"
	e.createPolicy(t, builder.MakeTTLPolicy(name).Selector("test", e.ns).TTLAfterSuccess(0).TTLAfterFailure(0).DryRun().Obj())
	e.waitPolicy(t, name, "ready", func(p *v1alpha1.TTLPolicy) bool { return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) })
	job := e.createJob(t, builder.MakeJob("j", e.ns).Label("test", e.ns).Obj())
	e.finishJob(t, job, batchv1.JobFailed, time.Now())
	framework.WaitFor(t, "WouldDelete event", func(ctx context.Context) (bool, error) {
		return e.hasEvent(ctx, job.Name, ttlafterfinished.ReasonWouldDelete)
	})
	e.waitPolicy(t, name, "counts the dry-run deletion", func(p *v1alpha1.TTLPolicy) bool {
		return p.Status.WouldDelete == 1 && p.Status.Deleted == 0 && p.Status.Matched == 1
	})
	e.sentinel(t)
	if !e.jobExists(t, job) {
		t.Error("dry-run policy deleted the Job")
	}
}

// TestPolicyStatusCountsDeletionPromptly checks that a policy's status
// shows a deletion within a second of it, rather than at a later periodic
// refresh: each deletion asks for a status write of its own, paced per
// policy (see the controller's statusPacer). The matched count follows.
func TestPolicyStatusCountsDeletionPromptly(t *testing.T) {
	// quiet is how long the policy's status must not have been written for
	// a deletion to be written at once (ttlafterfinished.StatusWriteInterval);
	// prompt bounds the time from the deletion to its count in the status.
	const quiet, prompt = time.Second, time.Second
	e := setup(t)
	name := e.ns + "-prompt"
	e.createPolicy(t, builder.MakeTTLPolicy(name).Selector("test", e.ns).TTLAfterSuccess(0).Obj())
	e.waitPolicy(t, name, "ready", func(p *v1alpha1.TTLPolicy) bool { return readyIs(p, metav1.ConditionTrue, v1alpha1.ReasonReady) })
	readyAt := time.Now()
	e.createJob(t, builder.MakeJob("running", e.ns).Label("test", e.ns).Obj())
	job := e.createJob(t, builder.MakeJob("done", e.ns).Label("test", e.ns).Obj())
	// The Ready status was just written; a deletion within the pacing
	// interval after a write waits for its end, by design. Start, as after
	// any lull, from a policy whose status was not written for that long.
	time.Sleep(quiet - time.Since(readyAt))

	e.finishJob(t, job, batchv1.JobComplete, time.Now())
	framework.WaitFor(t, "Job done deleted (the delete call made)", func(ctx context.Context) (bool, error) {
		j, err := e.client.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && (j.UID != job.UID || j.DeletionTimestamp != nil), err
	})
	deleted := time.Now()
	var shown time.Duration
	e.waitPolicy(t, name, "counts the deletion", func(p *v1alpha1.TTLPolicy) bool {
		shown = time.Since(deleted)
		return p.Status.Deleted >= 1
	})
	if shown > prompt {
		t.Errorf("the deletion showed in the policy's status %v after it, want within %v", shown.Round(time.Millisecond), prompt)
	} else {
		t.Logf("the deletion showed in the policy's status %v after it", shown.Round(time.Millisecond))
	}
	e.waitPolicy(t, name, "deleted 1, matched 1 (the running Job)", func(p *v1alpha1.TTLPolicy) bool {
		return p.Status.Deleted == 1 && p.Status.Matched == 1
	})
}

// TestPodPolicyCountsRunningPods: the controller keeps only finished pods
// outside the Job label until a policy targets Pods; then it watches every
// such pod, so the policy's status counts the running one it selects too,
// and a finished one it selects is deleted at its TTL.
func TestPodPolicyCountsRunningPods(t *testing.T) {
	e := setup(t)
	running := builder.MakePod("running", e.ns).Label("test", e.ns).Obj()
	done := builder.MakePod("done", e.ns).Label("test", e.ns).Obj()
	for _, p := range []*corev1.Pod{running, done} {
		got, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase := corev1.PodRunning
		if p.Name == "done" {
			phase = corev1.PodSucceeded
		}
		if err := framework.SetPodPhase(e.ctx, e.client, got, phase); err != nil {
			t.Fatal(err)
		}
	}
	name := e.ns + "-pods"
	e.createPolicy(t, builder.MakeTTLPolicy(name).Target("v1", "Pod").Selector("test", e.ns).TTLAfterSuccess(1).Obj())
	e.waitPolicy(t, name, "deleted 1, matched 1 (the running pod)", func(p *v1alpha1.TTLPolicy) bool {
		return p.Status.Deleted == 1 && p.Status.Matched == 1
	})
	if _, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "running", metav1.GetOptions{}); err != nil {
		t.Errorf("the running pod: %v, want it kept", err)
	}
}
