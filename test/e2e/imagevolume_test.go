package e2e

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// TestUpImageVolume runs, on up in each image mode, a Job whose pod
// mounts an image (ImageVolume, GA in v1.36) pulled from an in-process
// registry, whole at /data and its models directory at /models by
// subPath: the container reads the image's files there and cannot write.
func TestUpImageVolume(t *testing.T) {
	data, err := testimages.Static(map[string][]byte{"/models/m.bin": []byte("weights")}, "/models/m.bin")
	if err != nil {
		t.Fatal(err)
	}
	reg := testimages.NewRegistry()
	defer reg.Close()
	dataRef, err := reg.Push("e2e/data:1", data)
	if err != nil {
		t.Fatal(err)
	}
	script := `cat /data/models/m.bin; echo; cat /models/m.bin; echo; if touch /data/x 2>/dev/null; then echo writable; else echo read-only; fi`
	for _, mode := range []string{"oci", "host"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			up, c, _ := startUp(t, t.TempDir(), "--images="+mode)
			defer up.stop(t)
			job := builder.MakeJob("image-volume", "default").BackoffLimit(0).Command("sh", "-c", script).Obj()
			spec := &job.Spec.Template.Spec
			if mode == "oci" {
				shell := shellImage(t)
				ref, err := reg.Push("e2e/shell:1", shell)
				if err != nil {
					t.Fatal(err)
				}
				spec.Containers[0].Image = ref
			}
			spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				Image: &corev1.ImageVolumeSource{Reference: dataRef, PullPolicy: corev1.PullIfNotPresent},
			}}}
			spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
				{Name: "data", MountPath: "/data"},
				{Name: "data", MountPath: "/models", SubPath: "models"},
			}
			if _, err := c.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			got := waitJob(t, c, job.Namespace, job.Name, "finished", func(j *batchv1.Job) bool {
				return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
			})
			pods := podsOf(t, c, job)
			if !hasCondition(batchv1.JobComplete)(got) || len(pods) != 1 {
				t.Fatalf("Job did not complete with one pod: conditions %+v; pods: %s", got.Status.Conditions, describePods(pods))
			}
			logs, err := c.CoreV1().Pods(pods[0].Namespace).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := "weights\nweights\nread-only\n"; string(logs) != want {
				t.Errorf("logs %q, want %q", logs, want)
			}
			evs := podEvents(t, c, &pods[0], func(reasons []string) bool { return len(reasons) > 0 })
			t.Logf("events: %v", evs)
		})
	}
}
