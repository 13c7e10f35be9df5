package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// tokenMountPath is where the ServiceAccount admission plugin mounts its
// volume.
const tokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// apiAccessPod is a pod as the ServiceAccount admission plugin of v1.36
// leaves it: serviceAccountName default, and the kube-api-access volume
// (upstream's TokenVolumeSource, defaulted) mounted read-only in its
// container.
func apiAccessPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{
				{Name: "kube-api-access-x7k2p", MountPath: tokenMountPath, ReadOnly: true},
			}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o644),
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
					}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
					}}},
				},
			}}}},
		},
	}
}

// tokenRequests makes the agent's fake client answer TokenRequests with
// "token-for-<sa>" and returns the requests it got.
func tokenRequests(a *testAgent) *[]*authenticationv1.TokenRequest {
	var got []*authenticationv1.TokenRequest
	a.client.(*fake.Clientset).PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, k8sruntime.Object, error) {
		create := action.(k8stesting.CreateAction)
		if create.GetSubresource() != "token" {
			return false, nil, nil
		}
		req := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		got = append(got, req)
		out := req.DeepCopy()
		out.Status.Token = "token-for-" + create.(k8stesting.CreateActionImpl).Name
		return true, out, nil
	})
	return &got
}

// TestServiceAccountVolume writes the admission plugin's volume as the
// kubelet does: a pod-bound token of the plugin's expiry for the
// apiserver's own audience, the cluster CA and the namespace, files 0644,
// mounted read-only at the well-known path.
func TestServiceAccountVolume(t *testing.T) {
	rootCA := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "ns"}, Data: map[string]string{"ca.crt": "PEM"}}
	a, rec := volumeAgent(t, true, rootCA)
	requests := tokenRequests(a)
	pod := apiAccessPod()

	mounts, err := a.volumes.Mounts(context.Background(), pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(a.podDir(pod.UID), "volumes", "kube-api-access-x7k2p")
	if diff := cmp.Diff([]runtime.Mount{{Source: dir, Target: tokenMountPath, ReadOnly: true}}, mounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	wantFiles := map[string]string{"token": "token-for-default", "ca.crt": "PEM", "namespace": "ns"}
	for name, want := range wantFiles {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v (%v), want 0644", name, st.Mode().Perm(), err)
		}
	}
	wantRequests := []*authenticationv1.TokenRequest{{Spec: authenticationv1.TokenRequestSpec{
		// No audience: the apiserver's own, so with its default
		// --service-account-extend-token-expiration the token lasts a year.
		ExpirationSeconds: ptr.To[int64](3607),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p", UID: "uid-1"},
	}}}
	if diff := cmp.Diff(wantRequests, *requests); diff != "" {
		t.Errorf("token requests (-want +got):\n%s", diff)
	}
	if len(rec.Events) != 0 {
		t.Errorf("unexpected event %s", <-rec.Events)
	}
}

// TestServiceAccountVolumeWithoutIsolation mounts a pod that has only the
// admission plugin's volume on a node that cannot mount volumes: run
// without the token, and no token requested (that it is not refused:
// TestRefusalOfTheTokenVolume in the agent's package).
func TestServiceAccountVolumeWithoutIsolation(t *testing.T) {
	a, _ := volumeAgent(t, false)
	requests := tokenRequests(a)
	pod := apiAccessPod()
	mounts, err := a.volumes.Mounts(context.Background(), pod, &pod.Spec.Containers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 0 || len(*requests) != 0 {
		t.Errorf("mounts %+v, token requests %d; want none", mounts, len(*requests))
	}
}
