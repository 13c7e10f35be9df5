package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestCascadingDeletion checks that the garbage collector completes
// foreground and background deletions of a Job and the Pod it owns, and
// leaves the Pod alone on orphan deletion.
func TestCascadingDeletion(t *testing.T) {
	for name, policy := range map[string]metav1.DeletionPropagation{
		"foreground": metav1.DeletePropagationForeground,
		"background": metav1.DeletePropagationBackground,
		"orphan":     metav1.DeletePropagationOrphan,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := framework.CreateNamespace(t)
			c := framework.Client(t)
			// A Job no controller manages, so nothing but the GC acts on it.
			job, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("j", ns).ManagedBy("example.com/nobody").Obj(), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod, err := c.CoreV1().Pods(ns).Create(ctx, builder.MakePod("p", ns).OwnedByJob(job).Obj(), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("creating a pod in a fresh namespace: %v", err)
			}
			// The collector must know the pod before its owner goes: one
			// it sees only after the Job is gone looks dangling and is
			// deleted, whatever the propagation (upstream's behaviour).
			framework.WaitFor(t, "the garbage collector to see the Pod", func(context.Context) (bool, error) {
				return framework.ControlPlane().GarbageCollectorKnows(pod.UID), nil
			})
			if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
				t.Fatal(err)
			}
			framework.WaitFor(t, "Job to be gone", func(ctx context.Context) (bool, error) {
				_, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			if policy == metav1.DeletePropagationOrphan {
				framework.WaitFor(t, "Pod to lose its owner reference", func(ctx context.Context) (bool, error) {
					p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					return len(p.OwnerReferences) == 0, nil
				})
				return
			}
			framework.WaitFor(t, "Pod to be gone", func(ctx context.Context) (bool, error) {
				_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
		})
	}
}

// TestVersion checks that /version reports the embedded Kubernetes release,
// not the placeholder of an unstamped build (kubectl version parses it).
func TestVersion(t *testing.T) {
	info, err := framework.Client(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.GitVersion, "v1.36.") || info.Major != "1" || info.Minor != "36" {
		t.Errorf("server version = %+v, want v1.36.x", info)
	}
}

// TestAuthorization checks that the apiserver authenticates client
// certificates and authorizes with RBAC, as a real cluster does: the admin
// may do anything, an unauthenticated client nothing.
func TestAuthorization(t *testing.T) {
	ctx := context.Background()
	cfg := framework.Config()
	anon := rest.AnonymousClientConfig(cfg)
	anon.TLSClientConfig.CAFile = cfg.TLSClientConfig.CAFile
	c, err := kubernetes.NewForConfig(anon)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
		t.Errorf("anonymous list of pods: got %v, want Unauthorized or Forbidden", err)
	}
	if _, err := framework.Client(t).CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("admin list of nodes: %v", err)
	}
	ns := framework.CreateNamespace(t)
	if _, err := framework.Client(t).CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a service account: %v", err)
	}
}

// TestPodWatchesServedByEtcd checks that the apiserver has no watch cache for
// pods (--watch-cache-sizes=pods#0) and keeps the others: the cache closes a
// pod watcher that falls a few events behind, which the node agent's watch of
// every pod on the one node did hundreds of times in a 10,000-pod Job
// (issue 27), where an etcd watch waits for its reader.
func TestPodWatchesServedByEtcd(t *testing.T) {
	ctx := context.Background()
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod, err := c.CoreV1().Pods(ns).Create(ctx, builder.MakePod("p", ns).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got, ok := ev.Object.(*corev1.Pod); !ok || got.Name != pod.Name {
			t.Fatalf("watch of the node's pods: got %s %T, want the bound pod", ev.Type, ev.Object)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the watch of the node's pods saw nothing of the bound pod")
	}
	metrics, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	initialized := func(resource string) bool {
		for _, line := range strings.Split(string(metrics), "\n") {
			if strings.HasPrefix(line, "apiserver_watch_cache_initializations_total{") && strings.Contains(line, `resource="`+resource+`"`) {
				return true
			}
		}
		return false
	}
	if initialized("pods") {
		t.Error("the apiserver has a watch cache for pods, want none")
	}
	if !initialized("jobs") {
		t.Error("the apiserver has no watch cache for jobs, want one (only pods go without)")
	}
}
