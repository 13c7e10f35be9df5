package nodeagent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

func TestRefusal(t *testing.T) {
	emptyDir := corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pvc := corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}
	nfs := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}}}
	bundle := corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca"}}}}}}
	cases := []struct {
		name       string
		isolated   bool
		volumes    []corev1.Volume
		wantReason string
		wantIn     string
	}{
		{name: "no volumes, no isolation", isolated: false},
		{name: "volumes with isolation", isolated: true, volumes: []corev1.Volume{emptyDir, pvc}},
		{name: "volumes without isolation", isolated: false, volumes: []corev1.Volume{emptyDir}, wantReason: volume.ReasonNoPrivateFilesystem, wantIn: "volumes (work)"},
		{name: "unsupported kind", isolated: true, volumes: []corev1.Volume{emptyDir, nfs}, wantReason: volume.ReasonUnsupportedVolume, wantIn: `volume "data"`},
		{name: "unsupported projection", isolated: true, volumes: []corev1.Volume{bundle}, wantReason: volume.ReasonUnsupportedVolume, wantIn: "clusterTrustBundle"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := volumeAgent(t, tc.isolated)
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.volumes}}
			reason, msg := a.refusal(pod)
			if reason != tc.wantReason || !strings.Contains(msg, tc.wantIn) {
				t.Errorf("refusal = %q, %q; want %q containing %q", reason, msg, tc.wantReason, tc.wantIn)
			}
			if tc.wantReason == volume.ReasonNoPrivateFilesystem && !strings.Contains(msg, "no namespaces here") {
				t.Errorf("message does not say why: %q", msg)
			}
		})
	}
}

// isolatingRuntime is a runtime that reports a fixed isolation.
type isolatingRuntime struct {
	runtime.Runtime
	// ok and why are what Isolation reports.
	ok  bool
	why string
}

func (r isolatingRuntime) Isolation() (bool, string) { return r.ok, r.why }
func (isolatingRuntime) Name() string                { return "test" }

// volumeAgent is an agent with only what admission and volumes need.
func volumeAgent(t *testing.T, isolated bool) (*Agent, *record.FakeRecorder) {
	t.Helper()
	rec := record.NewFakeRecorder(10)
	a := &Agent{
		client:   fake.NewClientset(),
		opts:     Options{DataDir: t.TempDir()},
		runtime:  isolatingRuntime{ok: isolated, why: "no namespaces here"},
		workers:  map[types.UID]*worker{},
		refused:  map[types.UID]bool{},
		idRanges: newIDRanges(),
		clock:    testingclock.NewFakeClock(t0),
	}
	a.recorder = rec
	a.volumes = volume.New(a.volumeConfig())
	return a, rec
}

// TestRefusalOfTheTokenVolume: on a node that cannot mount volumes, a pod
// with only the ServiceAccount admission plugin's token volume is not
// refused (it runs without it); another volume still is, and the message
// names only that one.
func TestRefusalOfTheTokenVolume(t *testing.T) {
	a, _ := volumeAgent(t, false)
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes:    []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}},
		Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
	}}
	if reason, msg := a.refusal(pod); reason != "" {
		t.Fatalf("refused: %s: %s", reason, msg)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if reason, msg := a.refusal(pod); reason != ReasonNoPrivateFilesystem || !strings.Contains(msg, "volumes (work)") {
		t.Errorf("refusal = %q, %q; want %s naming only the volume work", reason, msg, ReasonNoPrivateFilesystem)
	}
}

// TestRefusalOfATakenHostPort: a pod given the node by nodeName whose host
// port a running pod holds is rejected as the kubelet rejects it; another
// address or protocol, or a finished holder, is no conflict.
func TestRefusalOfATakenHostPort(t *testing.T) {
	a, _ := volumeAgent(t, true)
	port := func(ip string, proto corev1.Protocol) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 21017, HostIP: ip, Protocol: proto}}}}}}
	}
	holder := port("", corev1.ProtocolTCP)
	a.workers["holder"] = &worker{pod: holder}
	reason, msg := a.refusal(port("", corev1.ProtocolTCP))
	if reason != reasonNodePorts || msg != "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports" {
		t.Errorf("a taken host port: %q, %q", reason, msg)
	}
	if reason, _ := a.refusal(port("", corev1.ProtocolUDP)); reason != "" {
		t.Errorf("another protocol refused: %s", reason)
	}
	holder.Spec.Containers[0].Ports[0].HostIP = "127.0.0.1"
	if reason, _ := a.refusal(port("10.244.0.1", corev1.ProtocolTCP)); reason != "" {
		t.Errorf("another address refused: %s", reason)
	}
	holder.Status.Phase = corev1.PodSucceeded
	if reason, _ := a.refusal(port("", corev1.ProtocolTCP)); reason != "" {
		t.Errorf("a port of a finished pod refused: %s", reason)
	}
}
