package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/internal/testimages"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// staticImage builds the Go program of testdata/<program> statically and
// returns an image whose entrypoint it is.
func staticImage(t *testing.T, program string) v1.Image {
	t.Helper()
	out := filepath.Join(t.TempDir(), program)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./testdata/"+program)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", program, err, msg)
	}
	binary, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimages.Static(map[string][]byte{program: binary}, "/"+program)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestUpPodNetwork runs, on `up --network=pod`, the pattern of Kubernetes'
// "Job with Pod-to-Pod Communication" example and of distributed training:
// an Indexed Job of 4 behind a headless Service, each pod listening on the
// same port (29500) and reaching every other by <job>-<index>.<service>. It
// checks the pods' addresses, the Service's EndpointSlice, in-cluster
// access through the kubernetes Service, and that a stop leaves nothing
// of the network on the host.
//
// As a user (the subtest "user") up runs in the rootless node: a user and
// network namespace of its own linked to this host by pasta; the same
// checks pass there, and a stop leaves no pasta behind.
func TestUpPodNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as root, and as another user from root")
	}
	archive := sharedArchive(t, map[string]v1.Image{podNetCheckRef: staticImage(t, "podnetcheck"), inClusterRef: inClusterImage(t)})
	t.Run("root", func(t *testing.T) {
		dataDir := t.TempDir()
		imageLoad(t, dataDir, archive)
		up, c, _ := startUp(t, dataDir, "--images=oci", "--network=pod")
		podNetworkChecks(t, up, c, dataDir)
		if _, err := net.InterfaceByName("jobkeeper0"); err == nil {
			t.Error("the bridge jobkeeper0 is left after a stop")
		}
	})
	t.Run("user", func(t *testing.T) {
		dataDir, start := rootlessUp(t, archive)
		up, c := start(t, "--images=oci")
		var pastas []int
		all := pastaProcesses(t)
		for _, pid := range processesBelow(t, up.cmd.Process.Pid) {
			if all[pid] {
				pastas = append(pastas, pid)
			}
		}
		if len(pastas) != 1 {
			t.Errorf("%d pasta processes run for the node, want 1", len(pastas))
		}
		podNetworkChecks(t, up, c, dataDir)
		// pasta ends with the node's up.
		gone(t, "pasta after the stop", pastas...)
	})
}

// sharedArchive writes images into a docker-save archive that other users
// may read too (the rootless subtests load it as theirs).
func sharedArchive(t *testing.T, images map[string]v1.Image) string {
	t.Helper()
	archive := filepath.Join(enterableDir(t, "jobkeeper-images-"), "images.tar")
	if err := testimages.WriteDockerArchive(archive, images); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(archive, 0o644); err != nil {
		t.Fatal(err)
	}
	return archive
}

// The images of TestUpPodNetwork.
const podNetCheckRef, inClusterRef = "jobkeeper.test/e2e/podnetcheck:1", "jobkeeper.test/e2e/inclusterlist:1"

// rootlessRequiredEnv, set as in CI, makes the tests of the rootless node
// fail rather than skip where pasta or /dev/net/tun is missing.
const rootlessRequiredEnv = "JOBKEEPER_TEST_ROOTLESS_REQUIRED"

// requireRootless skips (or, with $JOBKEEPER_TEST_ROOTLESS_REQUIRED, fails)
// the test where the rootless node cannot run: no pasta, or a
// /dev/net/tun that other users cannot open.
func requireRootless(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("pasta"); err != nil {
		why = "pasta is not installed (apt install passt)"
	} else if st, err := os.Stat("/dev/net/tun"); err != nil || st.Mode().Perm()&0o006 != 0o006 {
		why = "/dev/net/tun is not readable and writable by other users (chmod 0666 /dev/net/tun)"
	}
	if why == "" {
		return
	}
	if os.Getenv(rootlessRequiredEnv) != "" {
		t.Fatalf("the rootless node cannot run here: %s", why)
	}
	t.Skipf("the rootless node cannot run here: %s", why)
}

// pastaProcesses are the pids of the pasta processes running now (by
// their argv[0]).
func pastaProcesses(t *testing.T) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// up starts it as "pasta" (argv[0]); its program may be another
		// (Debian's pasta runs passt.avx2 where the CPU has AVX2).
		if cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil {
			if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); filepath.Base(argv0) == "pasta" {
				pids[pid] = true
			}
		}
	}
	return pids
}

// podNetworkChecks runs TestUpPodNetwork's workload on up, whose data
// directory has its images loaded, and stops up.
func podNetworkChecks(t *testing.T, up *process, c kubernetes.Interface, dataDir string) {
	t.Helper()
	ctx := context.Background()
	stopped := false
	defer func() {
		if !stopped {
			up.stop(t)
		}
	}()
	const checkRef = podNetCheckRef

	ns := "podnet"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const name, service, n = "ddp", "ddp-workers", 4
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{batchv1.JobNameLabel: name},
			Ports: []corev1.ServicePort{{Name: "rendezvous", Port: 29500}}},
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A ClusterIP Service that leads to index 0 alone, as a rendezvous
	// address (MASTER_ADDR) does.
	leader := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "leader", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{batchv1.JobNameLabel: name, batchv1.JobCompletionIndexAnnotation: "0"},
			Ports: []corev1.ServicePort{{Name: "rendezvous", Port: 29500}}},
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, leader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := builder.MakeJob(name, ns).BackoffLimit(0).Obj()
	job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	job.Spec.Completions, job.Spec.Parallelism = ptr.To[int32](n), ptr.To[int32](n)
	job.Spec.Template.Spec.Subdomain = service
	job.Spec.Template.Spec.Containers[0].Image = checkRef
	job.Spec.Template.Spec.Containers[0].Command = nil
	job.Spec.Template.Spec.Containers[0].Args = []string{"-job", name, "-service", service, "-n", fmt.Sprint(n), "-port", "29500", "-leader", leader.Name}
	job.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "rendezvous", ContainerPort: 29500}}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// While the pods run, the Service's EndpointSlice names them.
	var slice *discoveryv1.EndpointSlice
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		slice = &list.Items[0]
		return len(slice.Endpoints) == n, nil
	}); err != nil {
		t.Errorf("the Service's EndpointSlice never listed %d pods: %+v\n%s", n, slice, jobPodsAndEvents(c, ns, name))
	} else {
		for _, e := range slice.Endpoints {
			if e.Hostname == nil || !strings.HasPrefix(*e.Hostname, name+"-") {
				t.Errorf("endpoint %+v has no hostname %s-<index>", e, name)
			}
		}
	}

	got := waitJob(t, c, ns, name, "finished", func(j *batchv1.Job) bool {
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
	})
	pods := podsOf(t, c, job)
	var logs strings.Builder
	for _, p := range pods {
		raw, err := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Errorf("logs of %s: %v", p.Name, err)
		}
		fmt.Fprintf(&logs, "--- %s (%s)\n%s", p.Name, p.Status.PodIP, raw)
	}
	if !hasCondition(batchv1.JobComplete)(got) {
		t.Fatalf("the Job did not complete: %+v\npods: %s\nlogs:\n%s", got.Status.Conditions, describePods(pods), logs.String())
	}
	pool := netip.MustParsePrefix("10.244.0.0/24")
	seen := map[string]bool{}
	for _, p := range pods {
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !pool.Contains(ip) || seen[p.Status.PodIP] {
			t.Errorf("pod %s has the address %q: want its own in %s", p.Name, p.Status.PodIP, pool)
		}
		seen[p.Status.PodIP] = true
	}
	for i := range n {
		if !strings.Contains(logs.String(), fmt.Sprintf("reached %s-%d.%s at 10.244.0.", name, i, service)) {
			t.Errorf("no pod says it reached %s-%d at a pod address:\n%s", name, i, logs.String())
		}
	}
	if got := strings.Count(logs.String(), "reached leader at 10.0.0."); got != n {
		t.Errorf("%d pods reached the leader Service at its cluster IP, want %d:\n%s", got, n, logs.String())
	}
	if got := strings.Count(logs.String(), ": it answered 0\n"); got != 2*n {
		t.Errorf("%d answers from index 0, want %d (its name and the leader Service, from each pod):\n%s", got, 2*n, logs.String())
	}

	// In-cluster clients reach the apiserver at the kubernetes Service.
	grantPodReader(t, c, ns, "list")
	lister := builder.MakeJob("incluster", ns).BackoffLimit(0).Obj()
	lister.Spec.Template.Spec.Containers[0].Image = inClusterRef
	lister.Spec.Template.Spec.Containers[0].Command, lister.Spec.Template.Spec.Containers[0].Args = nil, nil
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, lister, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, ns, lister.Name, "finished", func(j *batchv1.Job) bool {
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
	})
	lp := podsOf(t, c, lister)
	if len(lp) != 1 {
		t.Fatalf("%d pods of the in-cluster Job", len(lp))
	}
	raw, err := c.CoreV1().Pods(ns).GetLogs(lp[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if !strings.Contains(string(raw), "apiserver: https://10.0.0.1:443") || !strings.Contains(string(raw), "pods in "+ns+": ") {
		t.Errorf("the in-cluster program did not list pods through the kubernetes Service (logs: %v):\n%s\n%s", err, raw, jobPodsAndEvents(c, ns, lister.Name))
	}

	up.stop(t)
	stopped = true
	if entries, _ := os.ReadDir(filepath.Join(dataDir, "node", "podnet", "netns")); len(entries) > 0 {
		t.Errorf("pinned namespaces left after a stop: %v", entries)
	}
}

// TestUpPodNetworkRefusedAsUser: as another user, where pasta is missing,
// --network=pod refuses to start, in one line saying what to install and
// what to use instead.
func TestUpPodNetworkRefusedAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as another user, as root")
	}
	base := enterableDir(t, "jobkeeper-podnet-")
	exe := filepath.Join(base, "jobkeeper")
	copyFile(t, binary, exe, 0o755)
	cred := &syscall.Credential{Uid: escapeUID, Gid: escapeUID}
	// A PATH without pasta.
	p := startBinaryAs(t, cred, []string{"HOME=" + base, "PATH=" + base}, exe, "up", "--data-dir", filepath.Join(base, "data"), "--port", "0", "--images=host", "--network=pod")
	code, out := p.waitExit(t, startTimeout)
	if code == 0 || !strings.Contains(out, "pasta") || !strings.Contains(out, "apt install passt") || !strings.Contains(out, "--network=host") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("up --network=pod as a user without pasta exited %d:\n%s", code, out)
	}
}

// TestUpWorkloadsOnPodNetwork runs, on `up --network=pod`, a Deployment of
// 2 behind a ClusterIP Service and a StatefulSet of 2 behind a headless
// Service, and a Job that reaches them by <svc>, <svc>.<ns>.svc.cluster.local
// and <sts>-0.<svc>: upstream's workload controllers, started when the
// first workload appeared, the Services' routing and the cluster DNS.
//
// As a user (the subtest "user") the same runs in the rootless node.
func TestUpWorkloadsOnPodNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test runs up as root, and as another user from root")
	}
	archive := sharedArchive(t, map[string]v1.Image{podNetCheckRef: staticImage(t, "podnetcheck")})
	t.Run("root", func(t *testing.T) {
		dataDir := t.TempDir()
		imageLoad(t, dataDir, archive)
		up, c, _ := startUp(t, dataDir, "--images=oci", "--network=pod")
		defer up.stop(t)
		workloadsOnPodNetwork(t, c, true)
	})
	t.Run("user", func(t *testing.T) {
		_, start := rootlessUp(t, archive)
		up, c := start(t, "--images=oci")
		defer up.stop(t)
		// This host does not reach the node namespace's addresses.
		workloadsOnPodNetwork(t, c, false)
	})
}

// workloadsOnPodNetwork runs TestUpWorkloadsOnPodNetwork's workloads on up,
// whose data directory has the podnetcheck image; with fromHost it also
// reaches the web Service's node port from this host.
func workloadsOnPodNetwork(t *testing.T, c kubernetes.Interface, fromHost bool) {
	t.Helper()
	ctx := context.Background()
	const ref = podNetCheckRef
	ns := "apps"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	server := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
				Name: "server", Image: ref, Args: []string{"-serve", "-port", "8080"},
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}}},
		}
	}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Type:  corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080}}}},
	} {
		if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: server("web")},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Deployment on up --network=pod: %v", err)
	}
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: server("db")},
	}
	if _, err := c.AppsV1().StatefulSets(ns).Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err1 := c.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		s, err2 := c.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		return err1 == nil && err2 == nil && d.Status.ReadyReplicas == 2 && s.Status.ReadyReplicas == 2, nil
	}); err != nil {
		pods, _ := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		t.Fatalf("the Deployment and the StatefulSet never had 2 ready replicas each: %s", describePods(pods.Items))
	}

	// Ready replicas are not yet routed ones: the Service's EndpointSlice
	// lists both as ready before the client asks (the proxy follows it
	// within moments).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == 2, nil
	}); err != nil {
		t.Fatal("the web Service's EndpointSlices never listed 2 ready endpoints")
	}
	time.Sleep(time.Second)
	job := builder.MakeJob("client", ns).BackoffLimit(0).Obj()
	job.Spec.Template.Spec.Containers[0].Image = ref
	job.Spec.Template.Spec.Containers[0].Command = nil
	job.Spec.Template.Spec.Containers[0].Args = []string{"-port", "80", "-ask", "web,web,web,web,web,web,web,web,web,web,web.apps.svc.cluster.local"}
	job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "db", Image: ref,
		Args: []string{"-port", "8080", "-ask", "db-0.db,db-1.db.apps.svc.cluster.local"}}}
	if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, c, ns, job.Name, "finished", func(j *batchv1.Job) bool {
		return hasCondition(batchv1.JobComplete)(j) || hasCondition(batchv1.JobFailed)(j)
	})
	pods := podsOf(t, c, job)
	var logs strings.Builder
	for _, p := range pods {
		for _, container := range []string{"db", "main"} {
			raw, _ := c.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
			fmt.Fprintf(&logs, "--- %s/%s\n%s", p.Name, container, raw)
		}
	}
	if !hasCondition(batchv1.JobComplete)(got) {
		t.Fatalf("the client Job did not complete: %s\n%s", describePods(pods), logs.String())
	}
	out := logs.String()
	for _, want := range []string{"reached db-0.db at 10.244.0.", ": it answered db-0\n", ": it answered db-1\n", "reached web.apps.svc.cluster.local at 10.0.0."} {
		if !strings.Contains(out, want) {
			t.Errorf("the client's logs lack %q:\n%s", want, out)
		}
	}
	// Ten connections to the Service, spread over both replicas.
	answered := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "reached web at 10.0.0.") {
			answered[line[strings.LastIndex(line, " ")+1:]] = true
		}
	}
	if len(answered) != 2 {
		t.Errorf("the web Service's 10 connections reached %d replicas (%v), want 2:\n%s", len(answered), answered, out)
	}

	// The Service's node port, from this host at the node's address, as
	// the Node's InternalIP gives it.
	webSvc, err := c.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v", err)
	}
	nodeIP := internalIP(t, &nodes.Items[0])
	if nodeIP != podNetworkGateway {
		t.Errorf("the node's InternalIP is %s, want its pod-network address %s", nodeIP, podNetworkGateway)
	}
	if !fromHost {
		return
	}
	addr := net.JoinHostPort(nodeIP, strconv.Itoa(int(webSvc.Spec.Ports[0].NodePort)))
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("the web Service's node port %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(conn); err != nil || !strings.HasPrefix(string(b), "web-") {
		t.Errorf("the web Service's node port %s answered %q %v, want a web replica's name", addr, b, err)
	}
}
