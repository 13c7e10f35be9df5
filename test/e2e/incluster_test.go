package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// serviceAccountMountPath is where the ServiceAccount admission plugin
// mounts the token, ca.crt and namespace.
const serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// inClusterImage builds testdata/inclusterlist statically and returns an
// image whose entrypoint it is.
func inClusterImage(t *testing.T) v1.Image { return staticImage(t, "inclusterlist") }

// TestUpInClusterAccess runs, on `up --images=oci`, a Job whose container
// uses client-go's rest.InClusterConfig to list the pods of its namespace:
// the ServiceAccount admission plugin gives the pod the default
// ServiceAccount and its token volume, the node agent mounts it and points
// KUBERNETES_SERVICE_HOST/PORT at the apiserver, and RBAC decides: forbidden
// without a RoleBinding, allowed with one. automountServiceAccountToken is
// checked on the pod and the ServiceAccount with dry-run creates.
func TestUpInClusterAccess(t *testing.T) {
	ctx := context.Background()
	img := inClusterImage(t)
	dataDir := t.TempDir()
	up, c, _ := startUp(t, dataDir, "--images=oci")
	defer up.stop(t)

	ref := "jobkeeper.test/e2e/inclusterlist:1"
	archive := filepath.Join(t.TempDir(), "inclusterlist.tar")
	if err := testimages.WriteDockerArchive(archive, map[string]v1.Image{ref: img}); err != nil {
		t.Fatal(err)
	}
	imageLoad(t, dataDir, archive)

	ns := "incluster"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("automount", func(t *testing.T) {
		testAutomount(t, c, ns, ref)
	})

	t.Run("forbidden without a RoleBinding", func(t *testing.T) {
		logs := runInClusterJob(t, c, ns, "forbidden", ref, batchv1.JobFailed)
		want := `pods is forbidden: User "system:serviceaccount:` + ns + `:default" cannot list resource "pods"`
		if !strings.Contains(logs, want) {
			t.Errorf("logs do not say %q:\n%s", want, logs)
		}
	})

	grantPodReader(t, c, ns, "get", "list")

	t.Run("allowed with a RoleBinding", func(t *testing.T) {
		logs := runInClusterJob(t, c, ns, "allowed", ref, batchv1.JobComplete)
		// Its own pod and the forbidden Job's.
		if !strings.Contains(logs, "pods in "+ns+": 2\n") {
			t.Errorf("logs do not count the namespace's 2 pods:\n%s", logs)
		}
	})
}

// runInClusterJob runs a one-pod Job of the in-cluster program, waits for
// its condition want, checks how the pod reaches the apiserver, and returns
// the pod's logs.
func runInClusterJob(t *testing.T, c kubernetes.Interface, ns, name, ref string, want batchv1.JobConditionType) string {
	t.Helper()
	ctx := context.Background()
	job := builder.MakeJob(name, ns).BackoffLimit(0).Obj()
	job.Spec.Template.Spec.Containers[0].Image = ref
	job.Spec.Template.Spec.Containers[0].Command = nil
	job.Spec.Template.Spec.Containers[0].Args = nil
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, name, "finished", func(j *batchv1.Job) bool {
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
	})
	pods := podsOf(t, c, job)
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1: %s", len(pods), describePods(pods))
	}
	raw, err := c.CoreV1().Pods(ns).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", pods[0].Name, err)
	}
	logs := string(raw)
	if !hasCondition(want)(got) {
		t.Fatalf("Job conditions %+v, want %s; pod: %s\nlogs:\n%s", got.Status.Conditions, want, describePods(pods), logs)
	}
	// Sharing the host's network (--network=host, the default as a user),
	// the pod is given where the apiserver listens; with a network of its
	// own (the default as root), the kubernetes Service, as on a cluster.
	apiserver := "apiserver: https://10.0.0.1:443"
	if pods[0].Status.PodIP == "127.0.0.1" {
		apiserver = "apiserver: https://127.0.0.1:"
	}
	if !strings.Contains(logs, apiserver) {
		t.Errorf("the program did not reach the apiserver (%q):\n%s", apiserver, logs)
	}
	// The admission plugin's 3607 s, extended by the apiserver's default
	// --service-account-extend-token-expiration: the agent does not
	// refresh tokens, so this one must last.
	if !strings.Contains(logs, "token expires in 364 days\n") && !strings.Contains(logs, "token expires in 365 days\n") {
		t.Errorf("the mounted token does not last a year:\n%s", logs)
	}
	return logs
}

// testAutomount checks with dry-run creates, which run admission and store
// nothing, where the plugin mounts the token: by default, not when the pod
// or its ServiceAccount opts out, and the pod's choice over its
// ServiceAccount's.
func testAutomount(t *testing.T, c kubernetes.Interface, ns, ref string) {
	ctx := context.Background()
	noAuto := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-automount", Namespace: ns}, AutomountServiceAccountToken: ptr.To(false)}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, noAuto, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		// serviceAccount and automount are the pod's.
		serviceAccount string
		automount      *bool
		wantMounted    bool
	}{
		"default":                       {wantMounted: true},
		"pod opts out":                  {automount: ptr.To(false)},
		"ServiceAccount opts out":       {serviceAccount: noAuto.Name},
		"pod opts in over its account":  {serviceAccount: noAuto.Name, automount: ptr.To(true), wantMounted: true},
		"pod opts out over its account": {serviceAccount: "default", automount: ptr.To(false)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "automount", Namespace: ns},
				Spec: corev1.PodSpec{
					ServiceAccountName:           tc.serviceAccount,
					AutomountServiceAccountToken: tc.automount,
					Containers:                   []corev1.Container{{Name: "c", Image: ref}},
				},
			}
			got, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			wantAccount := tc.serviceAccount
			if wantAccount == "" {
				wantAccount = "default"
			}
			if got.Spec.ServiceAccountName != wantAccount {
				t.Errorf("serviceAccountName %q, want %q", got.Spec.ServiceAccountName, wantAccount)
			}
			var volume string
			for _, v := range got.Spec.Volumes {
				if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
					volume = v.Name
				}
			}
			var mounted bool
			for _, m := range got.Spec.Containers[0].VolumeMounts {
				if m.Name == volume && m.MountPath == serviceAccountMountPath && m.ReadOnly {
					mounted = true
				}
			}
			if mounted != tc.wantMounted || (volume != "") != tc.wantMounted {
				t.Errorf("token volume %q mounted %v, want mounted %v; volumes %+v, mounts %+v", volume, mounted, tc.wantMounted, got.Spec.Volumes, got.Spec.Containers[0].VolumeMounts)
			}
		})
	}
}

// grantPodReader lets the default ServiceAccount of ns do verbs on pods
// (a Role and its RoleBinding).
func grantPodReader(t *testing.T, c kubernetes.Interface, ns string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs}},
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "default-reads-pods", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
