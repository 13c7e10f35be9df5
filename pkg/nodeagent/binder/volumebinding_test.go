package binder

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/internal/storagetest"
)

// fakeVolumes is a volumeView over fixed objects.
type fakeVolumes struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	classes map[string]*storagev1.StorageClass
	volumes map[string]*corev1.PersistentVolume
	// users maps a claim's name to the UIDs of pods using it.
	users map[string][]types.UID
}

// view returns the volumeView of f on node "node-1".
func (f fakeVolumes) view() volumeView {
	notFound := func(r, name string) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: r}, name)
	}
	return volumeView{
		claim: func(_, name string) (*corev1.PersistentVolumeClaim, error) {
			if c, ok := f.claims[name]; ok {
				return c, nil
			}
			return nil, notFound("persistentvolumeclaims", name)
		},
		class: func(name string) (*storagev1.StorageClass, error) {
			if c, ok := f.classes[name]; ok {
				return c, nil
			}
			return nil, notFound("storageclasses", name)
		},
		volume: func(name string) (*corev1.PersistentVolume, error) {
			if v, ok := f.volumes[name]; ok {
				return v, nil
			}
			return nil, notFound("persistentvolumes", name)
		},
		volumes: func() ([]*corev1.PersistentVolume, error) {
			var out []*corev1.PersistentVolume
			for _, v := range f.volumes {
				out = append(out, v)
			}
			return out, nil
		},
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: NodeLabels("node-1")}},
		inUse: func(_, name string, uid types.UID) bool {
			for _, u := range f.users[name] {
				if u != uid {
					return true
				}
			}
			return false
		},
	}
}

// TestDecideVolumes checks the binder's volume step against the
// scheduler's: which pods wait, which claims get the selected node, which
// volumes are chosen, and the FailedScheduling messages.
func TestDecideVolumes(t *testing.T) {
	wffc := storagetest.Class("standard", "jobkeeper.dev/local-path", storagev1.VolumeBindingWaitForFirstConsumer)
	immediate := storagetest.Class("fast", "jobkeeper.dev/local-path", storagev1.VolumeBindingImmediate)
	static := storagetest.Class("local", noProvisioner, storagev1.VolumeBindingWaitForFirstConsumer)
	classes := map[string]*storagev1.StorageClass{"standard": wffc, "fast": immediate, "local": static}

	selected := storagetest.Claim("data", "standard", corev1.ReadWriteOnce)
	selected.Annotations = map[string]string{storagehelpers.AnnSelectedNode: "node-1"}
	boundClaim, boundPV := storagetest.Bound(storagetest.Claim("data", "standard", corev1.ReadWriteOnce), storagetest.Volume("pv-1", "standard", "node-1"))
	elsewhereClaim, elsewherePV := storagetest.Bound(storagetest.Claim("data", "standard", corev1.ReadWriteOnce), storagetest.Volume("pv-1", "standard", "node-2"))
	preBound := boundClaim.DeepCopy()
	preBound.Status.Phase = corev1.ClaimPending
	rwop := storagetest.Claim("data", "standard", corev1.ReadWriteOncePod)
	rwopBound, rwopPV := storagetest.Bound(rwop, storagetest.Volume("pv-1", "standard", "node-1"))
	rwopPV.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	deleting := storagetest.Claim("data", "standard", corev1.ReadWriteOnce)
	deleting.DeletionTimestamp = &metav1.Time{}
	lost := storagetest.Claim("data", "standard", corev1.ReadWriteOnce)
	lost.Spec.VolumeName, lost.Status.Phase = "pv-gone", corev1.ClaimLost
	gone := boundClaim.DeepCopy()
	gone.Spec.VolumeName = "pv-gone"

	type want struct {
		unschedulable string
		selectNode    []string
		preBind       map[string]string // volume -> claim
		wait          bool
	}
	cases := map[string]struct {
		claims  []*corev1.PersistentVolumeClaim
		volumes []*corev1.PersistentVolume
		users   map[string][]types.UID
		want    want
	}{
		"no claim yet": {
			want: want{unschedulable: `0/1 nodes are available: persistentvolumeclaim "data" not found.`},
		},
		"first consumer selects the node": {
			claims: []*corev1.PersistentVolumeClaim{storagetest.Claim("data", "standard", corev1.ReadWriteOnce)},
			want:   want{selectNode: []string{"data"}},
		},
		"selected, provisioning": {
			claims: []*corev1.PersistentVolumeClaim{selected},
			want:   want{wait: true},
		},
		"bound on this node": {
			claims:  []*corev1.PersistentVolumeClaim{boundClaim},
			volumes: []*corev1.PersistentVolume{boundPV},
		},
		"bound by the volume, the claim not yet": {
			claims:  []*corev1.PersistentVolumeClaim{preBound},
			volumes: []*corev1.PersistentVolume{boundPV},
			want:    want{wait: true},
		},
		"bound on another node": {
			claims:  []*corev1.PersistentVolumeClaim{elsewhereClaim},
			volumes: []*corev1.PersistentVolume{elsewherePV},
			want:    want{unschedulable: "0/1 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity."},
		},
		"bound to a volume that is gone": {
			claims: []*corev1.PersistentVolumeClaim{gone},
			want:   want{unschedulable: "0/1 nodes are available: 1 node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)."},
		},
		"immediate, not bound yet": {
			claims: []*corev1.PersistentVolumeClaim{storagetest.Claim("data", "fast", corev1.ReadWriteOnce)},
			want:   want{unschedulable: "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims."},
		},
		"static volume chosen": {
			claims:  []*corev1.PersistentVolumeClaim{storagetest.Claim("data", "local", corev1.ReadWriteOnce)},
			volumes: []*corev1.PersistentVolume{storagetest.Volume("pv-a", "local", "node-2"), storagetest.Volume("pv-b", "local", "node-1")},
			want:    want{preBind: map[string]string{"pv-b": "data"}},
		},
		"no static volume on this node": {
			claims:  []*corev1.PersistentVolumeClaim{storagetest.Claim("data", "local", corev1.ReadWriteOnce)},
			volumes: []*corev1.PersistentVolume{storagetest.Volume("pv-a", "local", "node-2")},
			want:    want{unschedulable: "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind."},
		},
		"being deleted": {
			claims: []*corev1.PersistentVolumeClaim{deleting},
			want:   want{unschedulable: `0/1 nodes are available: persistentvolumeclaim "data" is being deleted.`},
		},
		"lost": {
			claims: []*corev1.PersistentVolumeClaim{lost},
			want:   want{unschedulable: `0/1 nodes are available: persistentvolumeclaim "data" bound to non-existent persistentvolume "pv-gone".`},
		},
		"ReadWriteOncePod used by another pod": {
			claims:  []*corev1.PersistentVolumeClaim{rwopBound},
			volumes: []*corev1.PersistentVolume{rwopPV},
			users:   map[string][]types.UID{"data": {"other"}},
			want:    want{unschedulable: "0/1 nodes are available: 1 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod."},
		},
		"ReadWriteOncePod used by this pod only": {
			claims:  []*corev1.PersistentVolumeClaim{rwopBound},
			volumes: []*corev1.PersistentVolume{rwopPV},
			users:   map[string][]types.UID{"data": {"pod"}},
		},
		"ReadWriteOnce shared on the node": {
			claims:  []*corev1.PersistentVolumeClaim{boundClaim},
			volumes: []*corev1.PersistentVolume{boundPV},
			users:   map[string][]types.UID{"data": {"other"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := fakeVolumes{claims: map[string]*corev1.PersistentVolumeClaim{}, classes: classes, volumes: map[string]*corev1.PersistentVolume{}, users: tc.users}
			for _, c := range tc.claims {
				f.claims[c.Name] = c
			}
			for _, v := range tc.volumes {
				f.volumes[v.Name] = v
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pod"},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				}},
			}
			d, err := decideVolumes(pod, f.view())
			if err != nil {
				t.Fatal(err)
			}
			if d.unschedulable != tc.want.unschedulable {
				t.Errorf("unschedulable %q, want %q", d.unschedulable, tc.want.unschedulable)
			}
			if d.wait != tc.want.wait {
				t.Errorf("wait %v, want %v", d.wait, tc.want.wait)
			}
			var sel []string
			for _, c := range d.selectNode {
				sel = append(sel, c.Name)
			}
			if len(sel) != len(tc.want.selectNode) || (len(sel) > 0 && sel[0] != tc.want.selectNode[0]) {
				t.Errorf("selectNode %v, want %v", sel, tc.want.selectNode)
			}
			if len(d.preBind) != len(tc.want.preBind) {
				t.Errorf("preBind %d volumes, want %v", len(d.preBind), tc.want.preBind)
			}
			for _, pv := range d.preBind {
				if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != tc.want.preBind[pv.Name] || pv.Spec.ClaimRef.UID != "uid-data" {
					t.Errorf("volume %s pre-bound to %+v, want claim %q", pv.Name, pv.Spec.ClaimRef, tc.want.preBind[pv.Name])
				}
			}
			wantReady := tc.want.unschedulable == "" && !tc.want.wait && len(tc.want.selectNode) == 0 && len(tc.want.preBind) == 0
			if d.ready() != wantReady {
				t.Errorf("ready %v, want %v", d.ready(), wantReady)
			}
		})
	}
}
