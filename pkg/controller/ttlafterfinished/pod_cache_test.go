package ttlafterfinished

import (
	"context"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestPodCacheOutsideTheJobLabel: with only the Job pods shared, the cache
// serves the union of those and its own informer of the other pods, which
// holds the finished ones only until a policy targets Pods, and every one
// after.
func TestPodCacheOutsideTheJobLabel(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase, jobLabel bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{}}, Status: corev1.PodStatus{Phase: phase}}
		if jobLabel {
			p.Labels["batch.kubernetes.io/controller-uid"] = "u"
		}
		return p
	}
	jobPod := pod("job-pod", corev1.PodRunning, true)
	finished := pod("finished", corev1.PodSucceeded, false)
	running := pod("running", corev1.PodRunning, false)
	client := fake.NewClientset(jobPod, finished, running)
	shared := informers.NewSharedInformerFactory(client, 0).Core().V1().Pods()
	if err := shared.Informer().GetIndexer().Add(jobPod); err != nil {
		t.Fatal(err)
	}
	p := &podCache{shared: shared.Lister(), client: client, handler: cache.ResourceEventHandlerFuncs{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if p.reconcile(true) {
		t.Errorf("reconcile before run started an informer")
	}
	// Not run: the fake clientset ignores selectors, so the informer's
	// store is filled here with what the apiserver would send
	// (othersListOptions is checked below).
	p.ctx, p.others, p.cancel = ctx, p.newOthers(false), func() {}
	if err := p.others.GetIndexer().Add(finished); err != nil {
		t.Fatal(err)
	}
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, x := range pods {
			out = append(out, x.Name)
		}
		sort.Strings(out)
		return out
	}
	if got := names(p.list("")); len(got) != 2 || got[0] != "finished" || got[1] != "job-pod" {
		t.Errorf("list: %v, want [finished job-pod]", got)
	}
	if got := names(p.list("other")); len(got) != 0 {
		t.Errorf("list of another namespace: %v, want none", got)
	}
	for _, name := range []string{"job-pod", "finished"} {
		if _, err := p.get("ns", name); err != nil {
			t.Errorf("get %s: %v", name, err)
		}
	}
	if _, err := p.get("ns", "running"); !apierrors.IsNotFound(err) {
		t.Errorf("get of a running pod outside the Job label: %v, want NotFound", err)
	}
	if p.reconcile(false) {
		t.Errorf("reconcile to the same set started an informer")
	}
	if !p.reconcile(true) || !p.all {
		t.Errorf("reconcile to every pod: no new informer")
	}
	if !p.reconcile(false) || p.all {
		t.Errorf("reconcile back to finished pods: no new informer")
	}
}

func TestOthersListOptions(t *testing.T) {
	var o metav1.ListOptions
	othersListOptions(false)(&o)
	if o.LabelSelector != "!batch.kubernetes.io/controller-uid" || o.FieldSelector != "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown" {
		t.Errorf("finished pods only: %+v", o)
	}
	o = metav1.ListOptions{}
	othersListOptions(true)(&o)
	if o.LabelSelector != "!batch.kubernetes.io/controller-uid" || o.FieldSelector != "" {
		t.Errorf("every pod: %+v", o)
	}
}
