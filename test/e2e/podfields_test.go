package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// shPod is a pod of one container "c" running script with sh, never
// restarted.
func shPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox:1.36", Command: []string{"sh", "-c", script}}},
		},
	}
}

// terminated returns the terminated state of the pod's first container
// once the pod finished.
func terminated(t *testing.T, p *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod %s: no terminated container: %+v", p.Name, p.Status.ContainerStatuses)
	}
	return p.Status.ContainerStatuses[0].State.Terminated
}

// finished reports a pod that succeeded or failed.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// TestUpPodFields checks what the node agent does with the pod fields a
// kubelet honours and it cannot always: the termination message (a Job's
// pod writes /dev/termination-log and fails; FallbackToLogsOnError),
// readOnlyRootFilesystem, dnsPolicy None with dnsConfig, fsGroup, a
// refused field (a dnsConfig entry with a newline), privileged as root and
// fields run without being enforced (resource limits).
func TestUpPodFields(t *testing.T) {
	ctx := context.Background()
	up, c, _ := startUp(t, t.TempDir(), "--extended-resource", "example.com/dongle=1")
	defer up.stop(t)
	ns := "default"
	create := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// runToEnd creates p and returns it once it succeeded or failed.
	runToEnd := func(t *testing.T, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		p = create(p)
		return waitPod(t, c, ns, p.Name, "finished", nodeTimeout, finished)
	}

	t.Run("termination message of a Job's pod", func(t *testing.T) {
		job := builder.MakeJob("says-why", ns).BackoffLimit(0).Command("sh", "-c", "echo -n 'input file missing' > /dev/termination-log; exit 1").Obj()
		if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitJob(t, c, ns, job.Name, "failed", hasCondition(batchv1.JobFailed))
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the Job's pods: %v, %d; want one", err, len(pods.Items))
		}
		term := terminated(t, &pods.Items[0])
		if term.ExitCode != 1 || term.Message != "input file missing" {
			t.Errorf("terminated %d %q, want exit code 1 and the message written", term.ExitCode, term.Message)
		}
		if _, err := os.Stat("/dev/termination-log"); err == nil {
			t.Errorf("the container's /dev/termination-log reached the host's /dev")
		}
	})

	t.Run("FallbackToLogsOnError", func(t *testing.T) {
		p := shPod("fallback", "echo first; echo last words; exit 2")
		p.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
		got := runToEnd(t, p)
		if term := terminated(t, got); term.Message != "first\nlast words\n" {
			t.Errorf("message %q, want the log's end", term.Message)
		}
	})

	t.Run("readOnlyRootFilesystem", func(t *testing.T) {
		p := shPod("read-only", "if touch /etc/x 2>/dev/null; then echo -n root-writable > /dev/termination-log; exit 1; fi; echo ok > /work/x && cat /work/x > /dev/termination-log")
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
		p.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		got := runToEnd(t, p)
		if term := terminated(t, got); got.Status.Phase != corev1.PodSucceeded || term.Message != "ok\n" {
			t.Errorf("phase %s, message %q; want Succeeded and the volume written", got.Status.Phase, term.Message)
		}
	})

	t.Run("dnsPolicy None", func(t *testing.T) {
		p := shPod("dns", "cat /etc/resolv.conf > /dev/termination-log")
		p.Spec.DNSPolicy = corev1.DNSNone
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.53"}, Searches: []string{"example.test"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}
		got := runToEnd(t, p)
		if term := terminated(t, got); term.Message != "search example.test\nnameserver 192.0.2.53\noptions ndots:2\n" {
			t.Errorf("resolv.conf %q", term.Message)
		}
	})

	t.Run("fsGroup", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("fsGroup needs up to run as root")
		}
		p := shPod("fsgroup", "stat -c '%g %A' /work > /dev/termination-log")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](2345)}
		p.Spec.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		got := runToEnd(t, p)
		if term := terminated(t, got); term.Message != "2345 drwxrwsrwx\n" {
			t.Errorf("emptyDir group and mode %q, want 2345 drwxrwsrwx", term.Message)
		}
	})

	t.Run("supplementalGroups and fsGroup in host mode", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("groups need up to run as root")
		}
		p := shPod("groups", "id -G > /dev/termination-log")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{3456}, FSGroup: ptr.To[int64](2345)}
		got := runToEnd(t, p)
		groups := strings.Fields(terminated(t, got).Message)
		if !slices.Contains(groups, "3456") || !slices.Contains(groups, "2345") {
			t.Errorf("id -G says %q, want the supplemental group 3456 and the fsGroup 2345", groups)
		}
	})

	t.Run("dnsConfig option with a newline is refused", func(t *testing.T) {
		p := shPod("dns-newline", "true")
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots:1\nnameserver 192.0.2.1"}}}
		p = create(p)
		got := waitPod(t, c, ns, p.Name, "failed", nodeTimeout, phaseIs(corev1.PodFailed))
		const why = `spec.dnsConfig.options[0].name: "ndots:1\nnameserver 192.0.2.1" has whitespace or a control character`
		if got.Status.Reason != nodeagent.ReasonInvalidDNSConfig || !strings.HasPrefix(got.Status.Message, "Pod was rejected: "+why) {
			t.Errorf("pod status %q %q", got.Status.Reason, got.Status.Message)
		}
		events := podEvents(t, c, got, func(evs []string) bool { return strings.Contains(strings.Join(evs, "\n"), why) })
		if !strings.Contains(strings.Join(events, "\n"), nodeagent.ReasonInvalidDNSConfig+": "+why) {
			t.Errorf("no Warning event of the refusal: %q", events)
		}
	})

	// privileged, as root: every capability this host's root has (as
	// another user it is refused: unit-tested in TestDecideFeatures).
	// Upstream's own e2e Jobs that write to a hostPath set it.
	t.Run("privileged runs as root with every capability", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs up to run as root")
		}
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		var bounding string
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "CapBnd:\t"); ok {
				bounding = v
			}
		}
		p := shPod("privileged", "grep CapEff /proc/self/status | cut -f2 > /dev/termination-log")
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		p = create(p)
		got := waitPod(t, c, ns, p.Name, "succeeded", nodeTimeout, phaseIs(corev1.PodSucceeded))
		if msg := strings.TrimSpace(terminated(t, got).Message); msg != bounding {
			t.Errorf("a privileged container's CapEff is %q, want this host's root's %q", msg, bounding)
		}
	})

	// Fields run without being enforced: the pod succeeds and one
	// NotEnforced Warning event names the field.
	for _, tc := range []struct {
		name, field string
		needsRoot   bool
		set         func(*corev1.Container)
	}{
		// As root, memory and cpu limits are enforced (cgroups) and an
		// extended resource's is not; as a user, none is but
		// ephemeral-storage's (eviction).
		{name: "limits run with a warning", field: unenforcedLimit(),
			set: func(c *corev1.Container) {
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"), "example.com/dongle": resource.MustParse("1")}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsRoot && os.Geteuid() != 0 {
				t.Skip("needs up to run as root")
			}
			p := shPod("warned-"+strings.Split(tc.field, ".")[1], "true")
			tc.set(&p.Spec.Containers[0])
			p = create(p)
			got := waitPod(t, c, ns, p.Name, "succeeded", nodeTimeout, phaseIs(corev1.PodSucceeded))
			want := nodeagent.ReasonNotEnforced + `: The local node agent runs this pod without enforcing: ` + tc.field + ` (container "c")`
			events := podEvents(t, c, got, func(evs []string) bool { return strings.Contains(strings.Join(evs, "\n"), want) })
			if !strings.Contains(strings.Join(events, "\n"), want) {
				t.Errorf("no NotEnforced event: %q", events)
			}
		})
	}
}

// unenforcedLimit is how the NotEnforced event names an extended
// resource's limit beside memory and ephemeral-storage limits: alone as
// root, where the memory limit is enforced, with every limit as a user.
func unenforcedLimit() string {
	if os.Geteuid() == 0 {
		return "resources.limits.example.com/dongle"
	}
	return "resources.limits"
}
