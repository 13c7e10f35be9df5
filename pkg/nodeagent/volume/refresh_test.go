package volume

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestTokenNeedsRefresh checks the kubelet's rule: again after 80% of the
// requested lifetime, or after 24 hours.
func TestTokenNeedsRefresh(t *testing.T) {
	issued := t0
	cases := []struct {
		ttl  time.Duration
		age  time.Duration
		want bool
	}{
		{time.Hour, 47 * time.Minute, false},
		{time.Hour, 48 * time.Minute, true},
		{10 * time.Minute, 7 * time.Minute, false},
		{10 * time.Minute, 8 * time.Minute, true},
		{365 * 24 * time.Hour, 23 * time.Hour, false},
		{365 * 24 * time.Hour, 24 * time.Hour, true},
	}
	for _, tc := range cases {
		if got := tokenNeedsRefresh(issued, tc.ttl, issued.Add(tc.age)); got != tc.want {
			t.Errorf("ttl %s, age %s: refresh %v, want %v", tc.ttl, tc.age, got, tc.want)
		}
	}
}

// TestRefreshed checks which volumes and pods are refreshed.
func TestRefreshed(t *testing.T) {
	for _, tc := range []struct {
		src  corev1.VolumeSource
		want bool
	}{
		{corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}, true},
		{corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}, true},
		{corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}, true},
		{corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}, true},
		{corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, false},
		{corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{}}, false},
		{corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{}}, false},
	} {
		if got := refreshed(&corev1.Volume{VolumeSource: tc.src}); got != tc.want {
			t.Errorf("refreshed(%+v) = %v, want %v", tc.src, got, tc.want)
		}
	}
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"running":   {running, true},
		"pending":   {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, true},
		"succeeded": {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		"failed":    {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
		"deleting":  {deleting, false},
	} {
		if got := refreshable(tc.pod); got != tc.want {
			t.Errorf("%s: refreshable %v, want %v", name, got, tc.want)
		}
	}
}

// TestVolumeRefresh prepares a pod's volumes, changes the ConfigMap and the
// pod's labels, and checks that one refresh pass (reading the ConfigMap
// once for the two pods that mount it) rewrites the configMap and
// downwardAPI volumes (a subPath mount keeps the file it was mounted from,
// as upstream), keeps
// the projected token until it needs a refresh, and requests a new one after
// 80% of its lifetime.
func TestVolumeRefresh(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns"}, Data: map[string]string{"a": "1"}}
	a, _ := volumeAgent(t, true, cm)
	requests := tokenRequests(a)
	clk := a.clock.(*testingclock.FakeClock)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"v": "1"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{
				{Name: "cfg", MountPath: "/etc/cfg"},
				{Name: "cfg", MountPath: "/etc/a", SubPath: "a"},
				{Name: "info", MountPath: "/etc/info"},
				{Name: "token", MountPath: "/var/token"},
			}}},
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				}}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
					ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](600)},
				}}}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	mounts, err := a.volumes.Mounts(ctx, pod, &pod.Spec.Containers[0], func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	// A bind mount of the subPath's source holds that file, as an open
	// file does.
	held, err := os.Open(filepath.Join(mounts[1].Source, mounts[1].SubPath))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	vols := filepath.Join(a.podDir(pod.UID), "volumes")

	// A second pod mounting the same ConfigMap.
	other := pod.DeepCopy()
	other.Name, other.UID = "q", "uid-2"
	other.Spec.Volumes = other.Spec.Volumes[:1]
	other.Spec.Containers[0].VolumeMounts = other.Spec.Containers[0].VolumeMounts[:1]
	if _, err := a.volumes.Mounts(ctx, other, &other.Spec.Containers[0], func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}

	// The refresh reads pods from the agent's lister.
	a.volumes.cfg.Pods = podListerOf(t, pod, other)
	cm.Data["a"] = "2"
	if _, err := a.client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Labels["v"] = "2"
	clk.Step(time.Minute)
	fake := a.client.(*k8sfake.Clientset)
	fake.ClearActions()
	a.volumes.RefreshAll(ctx)
	gets := 0
	for _, act := range fake.Actions() {
		if act.GetVerb() == "get" && act.GetResource().Resource == "configmaps" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("a refresh pass read the ConfigMap %d times for two pods, want once", gets)
	}
	if got := volumeFiles(t, filepath.Join(a.podDir(other.UID), "volumes"))["cfg/a"].content; got != "2" {
		t.Errorf("the second pod's cfg/a after a refresh = %q, want 2", got)
	}
	files := volumeFiles(t, vols)
	if files["cfg/a"].content != "2" || files["info/labels"].content != `v="2"` {
		t.Errorf("after a refresh: cfg/a %q, info/labels %q; want 2, v=\"2\"", files["cfg/a"].content, files["info/labels"].content)
	}
	if b, err := io.ReadAll(held); err != nil || string(b) != "1" {
		t.Errorf("the subPath mount's source reads %q (%v), want the first version", b, err)
	}
	if len(*requests) != 1 {
		t.Errorf("%d token requests after a refresh within the token's lifetime, want 1", len(*requests))
	}
	clk.Step(8 * time.Minute)
	a.volumes.RefreshAll(ctx)
	if len(*requests) != 2 {
		t.Errorf("%d token requests after 80%% of the token's lifetime, want 2", len(*requests))
	}

	// A finished pod is left as it is.
	pod.Status.Phase = corev1.PodSucceeded
	cm.Data["a"] = "3"
	if _, err := a.client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.volumes.RefreshAll(ctx)
	if got := volumeFiles(t, vols)["cfg/a"].content; got != "2" {
		t.Errorf("a finished pod's volume was refreshed: cfg/a %q", got)
	}
}

// podListerOf returns a pod lister holding pods (the same objects, so the
// test's later changes to them are seen).
func podListerOf(t *testing.T, pods ...*corev1.Pod) corelisters.PodLister {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, pod := range pods {
		if err := indexer.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(indexer)
}
