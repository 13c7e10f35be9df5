package volume

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// TestClaimMounts checks the mounts of a persistentVolumeClaim volume: the
// bound volume's host path, read-only when the pod says so; and the
// kubelet's FailedMount message while the claim is missing, not bound, or
// its volume is not bound back to it.
func TestClaimMounts(t *testing.T) {
	dir := t.TempDir()
	hostPathPV := func(claimUID string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(dir, "pv-1")}},
				ClaimRef:               &corev1.ObjectReference{Namespace: "ns", Name: "data", UID: types.UID(claimUID)},
			},
		}
	}
	boundClaim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", UID: "claim-uid"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	pendingClaim := boundClaim.DeepCopy()
	pendingClaim.Spec.VolumeName, pendingClaim.Status.Phase = "", corev1.ClaimPending
	cases := map[string]struct {
		claim    *corev1.PersistentVolumeClaim
		pv       *corev1.PersistentVolume
		readOnly bool
		// want are the mounts; wantErr, when set, is in the error and
		// the FailedMount event instead.
		want    []runtime.Mount
		wantErr string
	}{
		"bound": {
			claim: boundClaim, pv: hostPathPV("claim-uid"),
			want: []runtime.Mount{{Source: filepath.Join(dir, "pv-1"), Target: "/data"}},
		},
		"bound, read-only": {
			claim: boundClaim, pv: hostPathPV("claim-uid"), readOnly: true,
			want: []runtime.Mount{{Source: filepath.Join(dir, "pv-1"), Target: "/data", ReadOnly: true}},
		},
		"no claim": {
			wantErr: "unmounted volumes=[vol], unattached volumes=[vol], failed to process volumes=[vol]: error processing PVC ns/data: failed to fetch PVC from API server",
		},
		"claim pending": {
			claim:   pendingClaim,
			wantErr: "error processing PVC ns/data: PVC is not bound",
		},
		"volume bound to another claim": {
			claim: boundClaim, pv: hostPathPV("other-uid"),
			wantErr: "found PV object pv-1 but its pv.Spec.ClaimRef.UID other-uid does not point to claim.UID claim-uid",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, rec := volumeAgent(t, true)
			if tc.claim != nil {
				if _, err := a.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, tc.claim, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.pv != nil {
				if _, err := a.client.CoreV1().PersistentVolumes().Create(ctx, tc.pv, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pod-uid"},
				Spec: corev1.PodSpec{
					Volumes: []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{
						PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: tc.readOnly},
					}}},
					Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/data"}}}},
				},
			}
			got, err := a.volumes.Mounts(ctx, pod, &pod.Spec.Containers[0], nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("mounts: %v, want an error containing %q", err, tc.wantErr)
				}
				select {
				case e := <-rec.Events:
					if !strings.HasPrefix(e, "Warning FailedMount Unable to attach or mount volumes: ") || !strings.Contains(e, tc.wantErr) {
						t.Errorf("event %q, want a FailedMount saying %q", e, tc.wantErr)
					}
				default:
					t.Errorf("no FailedMount event")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
		})
	}
}
