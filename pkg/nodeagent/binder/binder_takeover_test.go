package binder

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// takeOverLister is the agent's pod lister at the moment its informer
// adds a bound pod: the List answers without the pod, and right after the
// pod is in the cache and the agent's handler has taken it over.
type takeOverLister struct {
	corelisters.PodLister
	takeOver func()
}

func (l *takeOverLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := l.PodLister.List(selector)
	if l.takeOver != nil {
		l.takeOver()
		l.takeOver = nil
	}
	return pods, err
}

// TestBinderClaimInUseWhileTheAgentTakesThePodOver: a pod the binder bound
// is assumed until the agent's informer has it; a binding pass that looks
// at the claim's users while that happens still finds the pod (it was
// found in neither place, and a second pod of a ReadWriteOncePod claim was
// bound beside it).
func TestBinderClaimInUseWhileTheAgentTakesThePodOver(t *testing.T) {
	first := claimPod("first", "u1", "only")
	first.Spec.NodeName = testNode
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	b := &Binder{assumed: map[types.UID]assumedPod{first.UID: {claims: podClaims(first)}}, unschedulable: map[types.UID]string{}}
	lister := &takeOverLister{PodLister: corelisters.NewPodLister(indexer), takeOver: func() {
		if err := indexer.Add(first); err != nil {
			t.Fatal(err)
		}
		b.Seen(first.UID)
	}}
	b.cfg = Config{NodeName: testNode, Pods: lister}
	if !b.volumeView(NodeLabels(testNode)).view.inUse("ns", "only", "u2") {
		t.Error("the claim of a pod the agent took over during the pass looks free")
	}
}

// binderClaimPod is a pod of namespace ns mounting the claim.
func claimPod(name, uid, claim string) *corev1.Pod {
	pod := builder.MakePod(name, "ns").UID(uid).Obj()
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
	return pod
}
