package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpPersistentVolumeClaims is the local volumes acceptance test: a Job
// whose claim does not exist yet waits with a FailedScheduling event; the claim,
// created without a class, gets the default "standard" class and a volume
// under <data-dir>/volumes; the Job writes a file to it and completes; a
// second Job mounting the claim read-only reads the file, cannot write, and
// completes; deleting the claim deletes the volume and its directory.
func TestUpPersistentVolumeClaims(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir)
	defer up.stop(t)
	ns := "default"

	class, err := c.StorageV1().StorageClasses().Get(ctx, "standard", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the default StorageClass: %v", err)
	}
	if class.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("StorageClass standard is not the default: %v", class.Annotations)
	}

	writer := claimJob("writer", ns, "results", false, "echo hello > /data/result")
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, writer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No claim yet: the pod is not scheduled, saying why, as the scheduler
	// does.
	waitEvent(t, c, ns, "FailedScheduling", `0/1 nodes are available: persistentvolumeclaim "results" not found.`)

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "results", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, writer.Name, "completed", hasCondition(batchv1.JobComplete))

	pvc, err = c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "standard" {
		t.Fatalf("claim: phase %s, class %v; want Bound, standard", pvc.Status.Phase, pvc.Spec.StorageClassName)
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(dataDir, "volumes", pv.Name)
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != dir || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Spec.NodeAffinity == nil || !pv.Spec.Capacity.Storage().Equal(resource.MustParse("1Gi")) {
		t.Errorf("volume %s: %+v; want hostPath %s, reclaim Delete, a node affinity, 1Gi", pv.Name, pv.Spec, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result")); err != nil || string(b) != "hello\n" {
		t.Errorf("the volume's directory holds %q (%v), want the writer's hello", b, err)
	}

	reader := claimJob("reader", ns, "results", true, `test "$(cat /data/result)" = hello && ! touch /data/written`)
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, reader.Name, "completed", hasCondition(batchv1.JobComplete))

	// The claim is released once no pod uses it: delete the Jobs and
	// their pods, then the claim; the volume and its directory go.
	foreground := metav1.DeletePropagationForeground
	for _, name := range []string{writer.Name, reader.Name} {
		if err := c.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollGone(t, func(ctx context.Context) error {
		_, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, pvc.Name, metav1.GetOptions{})
		return err
	})
	pollGone(t, func(ctx context.Context) error {
		_, err := c.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the volume's directory %s is still there (%v)", dir, err)
	}
}

// TestUpWaitForFirstConsumer checks the default class's binding on the
// first consumer: a claim no pod uses stays Pending, with the
// PersistentVolume controller's event; a Job using it gets it provisioned on
// the node and bound, then runs. A ReadWriteOncePod claim is used by one pod
// at a time. A Block claim is refused by the provisioner
// with an event saying why; a class with reclaim policy Retain keeps the
// volume and its directory when the claim is deleted.
func TestUpWaitForFirstConsumer(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir)
	defer up.stop(t)
	ns := "default"

	late := testClaim("late", ns, nil)
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, ns, "WaitForFirstConsumer", "waiting for first consumer to be created before binding")
	got, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, late.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.ClaimPending || got.Spec.VolumeName != "" {
		t.Fatalf("a claim no pod uses: phase %s, volume %q; want Pending, none", got.Status.Phase, got.Spec.VolumeName)
	}

	job := claimJob("first-consumer", ns, late.Name, false, "echo here > /data/f")
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, job.Name, "completed", hasCondition(batchv1.JobComplete))
	got, err = c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, late.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.ClaimBound || got.Annotations["volume.kubernetes.io/selected-node"] == "" {
		t.Fatalf("the claim after its first consumer: phase %s, annotations %v; want Bound with a selected node", got.Status.Phase, got.Annotations)
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, "volumes", got.Spec.VolumeName, "f")); err != nil || string(b) != "here\n" {
		t.Errorf("the volume holds %q (%v), want the Job's file", b, err)
	}

	// ReadWriteOncePod: a second pod waits, with the scheduler's reason,
	// until the first is gone.
	solo := testClaim("solo", ns, nil)
	solo.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, solo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	soloPod := func(name, command string) *corev1.Pod {
		p := builder.MakePod(name, ns).Command("sh", "-c", command).Obj()
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: solo.Name},
		}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	first, second := soloPod("solo-first", "sleep 600"), soloPod("solo-second", "true")
	if _, err := c.CoreV1().Pods(ns).Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, first.Name, "running", nodeTimeout, phaseIs(corev1.PodRunning))
	if _, err := c.CoreV1().Pods(ns).Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, ns, "FailedScheduling", "0/1 nodes are available: 1 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod.")
	if err := c.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitPod(t, c, ns, second.Name, "succeeded", nodeTimeout, phaseIs(corev1.PodSucceeded))

	// Block: provisioning is refused, saying why; the pod stays unscheduled.
	block := corev1.PersistentVolumeBlock
	raw := testClaim("raw", ns, nil)
	raw.Spec.VolumeMode = &block
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, raw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rawPod := builder.MakePod("raw-user", ns).Command("true").Obj()
	rawPod.Spec.Volumes = []corev1.Volume{{Name: "raw", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: raw.Name},
	}}}
	rawPod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "raw", DevicePath: "/dev/raw"}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, rawPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, ns, "ProvisioningFailed", "jobkeeper.dev/local-path does not support block volume provisioning")
	if p, err := c.CoreV1().Pods(ns).Get(ctx, rawPod.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("the Block claim's pod: %v, node %q; want it unscheduled", err, p.Spec.NodeName)
	}

	// Retain: the volume outlives its claim, Released, with its files.
	retain := corev1.PersistentVolumeReclaimRetain
	immediate := storagev1.VolumeBindingImmediate
	keep := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: "keep"},
		Provisioner:       "jobkeeper.dev/local-path",
		ReclaimPolicy:     &retain,
		VolumeBindingMode: &immediate,
	}
	if _, err := c.StorageV1().StorageClasses().Create(ctx, keep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept := testClaim("kept", ns, &keep.Name)
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pvName string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		k, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, kept.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pvName = k.Spec.VolumeName
		return k.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("an Immediate claim of class keep was not bound: %v", err)
	}
	dir := filepath.Join(dataDir, "volumes", pvName)
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, kept.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		pv, err = c.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Status.Phase == corev1.VolumeReleased, nil
	}); err != nil {
		t.Fatalf("the Retain volume %s did not become Released: %+v, %v", pvName, pv, err)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim policy %s, want Retain", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Errorf("the Retain volume's file is gone: %v", err)
	}
}

// TestUpConfigMapRefresh checks that a running pod sees an update of its
// configMap volume within the sync period (--sync-frequency=1s here), whole
// (the key's file swaps at once), while a subPath mount of the same key
// keeps the content it was mounted with, as upstream.
func TestUpConfigMapRefresh(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir(), "--sync-frequency=1s")
	defer up.stop(t)
	ns := "default"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"key": "one"}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Waits up to 60 s for the update, then checks the subPath mount.
	script := `echo started; i=0; while [ "$(cat /cfg/key)" != two ]; do i=$((i+1)); [ $i -lt 300 ] || exit 3; sleep 0.2; done; ` +
		`test -L /cfg/key && test "$(cat /sub/key)" = one`
	job := builder.MakeJob("reader", ns).BackoffLimit(0).Command("sh", "-c", script).Obj()
	spec := &job.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}},
	}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "cfg", MountPath: "/cfg"},
		{Name: "cfg", MountPath: "/sub/key", SubPath: "key"},
	}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, job.Name, "running", func(j *batchv1.Job) bool { return j.Status.Ready != nil && *j.Status.Ready == 1 })
	cm.Data["key"] = "two"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, job.Name, "completed", hasCondition(batchv1.JobComplete))
}

// testClaim is a 1Gi ReadWriteOnce claim, of class when it is not nil.
func testClaim(name, ns string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// claimJob is a one-pod Job running script in sh with the claim mounted at
// /data, read-only when readOnly.
func claimJob(name, ns, claim string, readOnly bool, script string) *batchv1.Job {
	job := builder.MakeJob(name, ns).BackoffLimit(0).Command("sh", "-c", script).Obj()
	spec := &job.Spec.Template.Spec
	spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly},
	}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return job
}

// waitEvent polls until an event of the namespace has reason and a message
// containing text.
func waitEvent(t *testing.T, c kubernetes.Interface, ns, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, nodeTimeout, true, func(ctx context.Context) (bool, error) {
		events, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event saying %q; events:\n%s", reason, text, strings.Join(seen, "\n"))
	}
}
