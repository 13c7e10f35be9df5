package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// The end-to-end tests of `up` as a good neighbour on the user's machine:
// nothing accepted that nothing runs, the user's kubeconfig kept, --version,
// a help with only what matters locally, a quiet shutdown, and reset.

// stackTrace matches what a Go stack trace or a zap "stacktrace" field
// leaves in a terminal or a log.
var stackTrace = regexp.MustCompile(`(?m)goroutine \d+ \[|"stacktrace"|^\s+/\S+\.go:\d+|\\n\\t/\S+\.go:\d+`)

// TestUpRefusesUnsupportedWorkloads checks that the workload kinds `up` has
// no controller for are refused at once, with a message that names the kind,
// says what `up` runs and where to read more, and still are after a restart.
//
// Services are accepted with a warning that says nothing routes them, but
// the apiserver's own kubernetes Service; Ingresses and NetworkPolicies with
// a warning that nothing serves or enforces them.
func TestUpRefusesUnsupportedWorkloads(t *testing.T) {
	dataDir := t.TempDir()
	// As another user --network=host is the default; as root it is given:
	// with pods' own network the workloads run (TestUpWorkloadsOnPodNetwork).
	p, c, kc := startUp(t, dataDir, "--network=host")
	checkRefused(t, c)
	checkServiceWarned(t, kc)
	checkNetworkingWarned(t, kc)
	p.stop(t)
	if t.Failed() {
		return
	}

	// A restart finds the policies stored and keeps refusing and warning.
	p2, c2, kc2 := startUp(t, dataDir, "--network=host")
	checkRefused(t, c2)
	checkServiceWarned(t, kc2)
	p2.stop(t)
}

// warnings is a rest.WarningHandler that keeps the warnings of responses.
type warnings struct {
	// mu guards texts.
	mu sync.Mutex
	// texts are the warnings received since the last take.
	texts []string
}

// HandleWarningHeader keeps the warning.
func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

// take returns the warnings received since the last take and forgets them.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.texts
	w.texts = nil
	return out
}

// warningClient returns a client of kubeconfig kc and the warnings it
// collects.
func warningClient(t *testing.T, kc string) (kubernetes.Interface, *warnings) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	got := &warnings{}
	cfg.WarningHandler = got
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, got
}

// checkNetworkingWarned creates an Ingress and a NetworkPolicy through a
// client of kubeconfig kc that collects warnings, and checks that each is
// created with one warning saying what `up` does not do.
func checkNetworkingWarned(t *testing.T, kc string) {
	t.Helper()
	ctx := context.Background()
	c, got := warningClient(t, kc)
	ns := metav1.NamespaceDefault
	check := func(kind string, err error, wants ...string) {
		t.Helper()
		texts := got.take()
		if err != nil {
			t.Errorf("creating an %s: %v; want it created, with a warning", kind, err)
		}
		if len(texts) != 1 {
			t.Errorf("creating an %s gave the warnings %q, want one", kind, texts)
		}
		for _, text := range texts {
			for _, want := range append(wants, "What up runs and what it refuses") {
				if !strings.Contains(text, want) {
					t.Errorf("the %s's warning does not say %q: %s", kind, want, text)
				}
			}
		}
	}
	pathType := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: "web.example",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &pathType,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}
	_, err := c.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{})
	check("Ingress", err, "no Ingress controller", "127.0.0.1:<containerPort>", "kubectl port-forward")
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "deny-", Namespace: ns},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	_, err = c.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
	check("NetworkPolicy", err, "does not enforce NetworkPolicies", "all traffic")
}

// checkServiceWarned creates a Service right away, through a client of
// kubeconfig kc that collects warnings, and checks that it is created and
// that the client got the warning saying nothing routes it and how to reach
// a pod instead; a dry-run creation of the kubernetes Service in default
// (refused as existing) gets no warning.
func checkServiceWarned(t *testing.T, kc string) {
	t.Helper()
	ctx := context.Background()
	c, got := warningClient(t, kc)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a Service: %v; want it created, with a warning", err)
	}
	texts := got.take()
	if len(texts) != 1 {
		t.Errorf("creating a Service gave the warnings %q, want one", texts)
	}
	for _, text := range texts {
		for _, want := range []string{"does not route Services", "127.0.0.1:<containerPort>", "kubectl port-forward", "What up runs and what it refuses"} {
			if !strings.Contains(text, want) {
				t.Errorf("the Service's warning does not say %q: %s", want, text)
			}
		}
	}

	apiserver, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Errorf("getting the kubernetes Service: %v", err)
		return
	}
	got.take()
	again := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: apiserver.Name, Namespace: apiserver.Namespace},
		Spec:       corev1.ServiceSpec{Ports: apiserver.Spec.Ports},
	}
	_, err = c.CoreV1().Services(again.Namespace).Create(ctx, again, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("a dry-run creation of the kubernetes Service: %v, want AlreadyExists", err)
	}
	if texts := got.take(); len(texts) > 0 {
		t.Errorf("the kubernetes Service of default got the warnings %q, want none", texts)
	}
}

// checkRefused creates one object of each refused kind, right away, and
// checks each refusal.
func checkRefused(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	selector := &metav1.LabelSelector{MatchLabels: labels}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	meta := metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault}
	apps := c.AppsV1()
	cases := map[string]func() error{
		"Deployment": func() error {
			_, err := apps.Deployments(meta.Namespace).Create(ctx, &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Selector: selector, Template: template}}, metav1.CreateOptions{})
			return err
		},
		"ReplicaSet": func() error {
			_, err := apps.ReplicaSets(meta.Namespace).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Selector: selector, Template: template}}, metav1.CreateOptions{})
			return err
		},
		"StatefulSet": func() error {
			_, err := apps.StatefulSets(meta.Namespace).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: selector, Template: template, ServiceName: "web"}}, metav1.CreateOptions{})
			return err
		},
		"DaemonSet": func() error {
			_, err := apps.DaemonSets(meta.Namespace).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template}}, metav1.CreateOptions{})
			return err
		},
	}
	for kind, create := range cases {
		err := create()
		if err == nil || apierrors.IsAlreadyExists(err) {
			t.Errorf("a %s was accepted (%v), and nothing under up would ever act on it", kind, err)
			continue
		}
		if !apierrors.IsForbidden(err) {
			t.Errorf("creating a %s: %v, want a Forbidden refusal", kind, err)
		}
		for _, want := range []string{"does not run " + kind + "s", "runs Jobs", "CronJobs", "What up runs and what it refuses", "jobkeeper up --help"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal of a %s does not say %q: %v", kind, want, err)
			}
		}
	}
	// What up does run is still accepted.
	job := builder.MakeJob("still-accepted", metav1.NamespaceDefault).Suspend(true).Obj()
	if _, err := c.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("creating a Job: %v", err)
	}
}

// TestUpMergesKubeconfig checks that --kubeconfig-out pointing at an existing
// kubeconfig keeps its other clusters, users and contexts, replaces a stale
// jobkeeper entry, and makes jobkeeper's context current.
func TestUpMergesKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	existing := clientcmdapi.NewConfig()
	existing.Clusters["kind-dev"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:40000"}
	existing.AuthInfos["kind-dev"] = &clientcmdapi.AuthInfo{Token: "kind-token"}
	existing.Contexts["kind-dev"] = &clientcmdapi.Context{Cluster: "kind-dev", AuthInfo: "kind-dev", Namespace: "work"}
	existing.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod.example.com"}
	existing.AuthInfos["prod"] = &clientcmdapi.AuthInfo{Token: "prod-token"}
	existing.Contexts["prod"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "prod"}
	// A stale entry from an earlier up, which must be replaced.
	existing.Clusters["jobkeeper"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	existing.Contexts["jobkeeper"] = &clientcmdapi.Context{Cluster: "jobkeeper", AuthInfo: "jobkeeper"}
	existing.CurrentContext = "kind-dev"
	if err := clientcmd.WriteToFile(*existing, path); err != nil {
		t.Fatal(err)
	}

	p, c, kc := startUp(t, t.TempDir(), "--kubeconfig-out", path)
	if kc != path {
		t.Errorf("up printed kubeconfig %s, want %s", kc, path)
	}
	// The printed kubeconfig (current context: jobkeeper's) reaches up.
	if _, err := c.CoreV1().Namespaces().Get(context.Background(), metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		t.Errorf("the merged kubeconfig does not reach up: %v", err)
	}
	p.stop(t)

	got, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentContext != "jobkeeper" {
		t.Errorf("current context %q, want jobkeeper", got.CurrentContext)
	}
	for _, name := range []string{"kind-dev", "prod"} {
		ctx, ok := got.Contexts[name]
		if !ok {
			t.Errorf("context %s was dropped; contexts left: %v", name, keys(got.Contexts))
			continue
		}
		if got.Clusters[ctx.Cluster] == nil || got.Clusters[ctx.Cluster].Server != existing.Clusters[name].Server {
			t.Errorf("cluster of context %s changed: %+v", name, got.Clusters[ctx.Cluster])
		}
		if got.AuthInfos[ctx.AuthInfo] == nil || got.AuthInfos[ctx.AuthInfo].Token != existing.AuthInfos[name].Token {
			t.Errorf("user of context %s changed", name)
		}
	}
	if got.Contexts["kind-dev"] != nil && got.Contexts["kind-dev"].Namespace != "work" {
		t.Errorf("context kind-dev lost its namespace")
	}
	if s := got.Clusters["jobkeeper"]; s == nil || s.Server == "https://127.0.0.1:1" {
		t.Errorf("the stale jobkeeper cluster was not replaced: %+v", s)
	}
}

// keys lists a map's keys.
func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestVersionFlag checks that `jobkeeper --version` prints what `jobkeeper
// version` prints, not the help.
func TestVersionFlag(t *testing.T) {
	code, flag := start(t, "--version").waitExit(t, 30*time.Second)
	_, command := start(t, "version").waitExit(t, 30*time.Second)
	if code != 0 || flag != command {
		t.Errorf("jobkeeper --version: exit %d, output %q; jobkeeper version printed %q", code, flag, command)
	}
}

// TestUpHelp checks that `up --help` says what up runs and refuses and lists
// no flag that means nothing locally, while those flags are still accepted.
func TestUpHelp(t *testing.T) {
	code, help := start(t, "up", "--help").waitExit(t, 30*time.Second)
	if code != 0 {
		t.Fatalf("up --help: exit %d, output:\n%s", code, help)
	}
	for _, want := range []string{"What up runs:", "CronJobs", "What it refuses:", "Deployments, ReplicaSets, StatefulSets and DaemonSets", "--data-dir", "--kubeconfig-out", "merged"} {
		if !strings.Contains(help, want) {
			t.Errorf("up --help does not say %q", want)
		}
	}
	for _, unwanted := range []string{"--leader-elect", "--manage-unclaimed-jobs", "--vmodule", "--version"} {
		if strings.Contains(help, unwanted) {
			t.Errorf("up --help lists %s, which means nothing locally", unwanted)
		}
	}
}

// TestUpCleanShutdown checks that a SIGTERM while a pod runs leaves no stack
// trace in the terminal or the logs, and that etcd's log stays small (it used
// to log every request as a warning).
func TestUpCleanShutdown(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	p, c, _ := startUp(t, dataDir, "--leader-elect=false")
	job := builder.MakeJob("sleeper", metav1.NamespaceDefault).Command("sleep", "300").Obj()
	if _, err := c.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, c, job.Namespace, job.Name, "running", func(j *batchv1.Job) bool { return j.Status.Ready != nil && *j.Status.Ready == 1 })
	p.stop(t)

	if m := stackTrace.FindString(p.output()); m != "" {
		t.Errorf("the terminal shows a stack trace (%q):\n%s", m, p.output())
	}
	logs, err := filepath.Glob(filepath.Join(dataDir, "logs", "*.log"))
	if err != nil || len(logs) < 2 {
		t.Fatalf("logs: %v, %v", logs, err)
	}
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if m := stackTrace.FindString(string(data)); m != "" {
			t.Errorf("%s holds a stack trace: %q", path, m)
		}
		if filepath.Base(path) == "etcd.log" {
			if n := strings.Count(string(data), "\n"); n > 50 {
				t.Errorf("etcd.log has %d lines after a short run, want a few (warnings only):\n%.2000s", n, data)
			}
		}
	}
}

// TestReset checks `jobkeeper reset`: refused while up runs and for a
// directory that is not a data directory, then removes the data directory
// and says what it removed.
func TestReset(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	p, _, _ := startUp(t, dataDir)

	code, out := start(t, "reset", "--data-dir", dataDir).waitExit(t, 30*time.Second)
	if code == 0 || !strings.Contains(out, "in use") {
		t.Errorf("reset while up runs: exit %d, output:\n%s", code, out)
	}
	oneLine(t, "reset while up runs", out)
	p.stop(t)
	if _, err := os.Stat(filepath.Join(dataDir, "etcd")); err != nil {
		t.Fatalf("reset while up ran removed etcd's data: %v", err)
	}

	other := t.TempDir()
	for _, name := range []string{"etcd", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(other, name), []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out = start(t, "reset", "--data-dir", other).waitExit(t, 30*time.Second)
	if code == 0 || !strings.Contains(out, "not a jobkeeper data directory") || !strings.Contains(out, "notes.txt") {
		t.Errorf("reset of another directory: exit %d, output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(other, "notes.txt")); err != nil {
		t.Errorf("reset of another directory removed a file: %v", err)
	}

	code, out = start(t, "reset", "--data-dir", dataDir).waitExit(t, 30*time.Second)
	if code != 0 {
		t.Fatalf("reset: exit %d, output:\n%s", code, out)
	}
	for _, want := range []string{"Removed " + filepath.Join(dataDir, "etcd"), "Removed " + dataDir + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("reset output does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data directory still there after reset: %v", err)
	}
}
