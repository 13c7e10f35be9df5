package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"jobkeeper.dev/jobkeeper/test/builder"
)

var (
	kubeconfigLine = regexp.MustCompile(`^Kubeconfig written to (\S+)$`)
	exportLine     = regexp.MustCompile(`^\s*export KUBECONFIG=(\S+)$`)
)

// startUp runs `jobkeeper up` on dataDir and returns the process and a client
// built from the kubeconfig it printed. Unless extra chooses --images, pods
// run their commands on this host (--images=host): the tests' pods use the
// host's shell and programs, and no registry is reachable from the tests.
func startUp(t *testing.T, dataDir string, extra ...string) (*process, kubernetes.Interface, string) {
	t.Helper()
	return startUpAs(t, nil, nil, binary, dataDir, extra...)
}

// startUpAs is startUp of the binary at path run as cred (nil: this
// process's user) with env added to the environment.
func startUpAs(t *testing.T, cred *syscall.Credential, env []string, path, dataDir string, extra ...string) (*process, kubernetes.Interface, string) {
	t.Helper()
	args := append([]string{"up", "--data-dir", dataDir, "--port", "0"}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--images") }) {
		args = append(args, "--images=host")
	}
	p := startBinaryAs(t, cred, env, path, args...)
	kc := p.waitForLine(t, kubeconfigLine, startTimeout)[1]
	// The export line follows the kubeconfig line; wait for it rather than
	// reading the output at once (the lines arrive one by one).
	if got := p.waitForLine(t, exportLine, 10*time.Second)[1]; got != kc {
		t.Errorf("up printed export KUBECONFIG=%s, want %s", got, kc)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("loading the printed kubeconfig: %v", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, c, kc
}

// TestUpLifecycle is the foundation's acceptance test: start, use, SIGTERM,
// restart with the same data, check, stop.
func TestUpLifecycle(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	p, c, kc := startUp(t, dataDir)
	if kc != filepath.Join(dataDir, "kubeconfig") {
		t.Errorf("kubeconfig at %s, want the default <data-dir>/kubeconfig", kc)
	}

	ns := "e2e"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Managed by nobody here, so only the garbage collector acts on it.
	job, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("doomed", ns).ManagedBy("example.com/nobody").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, builder.MakePod("doomed-pod", ns).OwnedByJob(job).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a pod owned by the Job: %v", err)
	}
	fg := metav1.DeletePropagationForeground
	if err := c.BatchV1().Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	pollGone(t, func(ctx context.Context) error {
		_, err := c.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		return err
	})
	pollGone(t, func(ctx context.Context) error {
		_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err
	})

	kept, err := c.BatchV1().Jobs(ns).Create(ctx, builder.MakeJob("kept", ns).ManagedBy("example.com/nobody").Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// A second instance on the same data directory must fail at once.
	second := start(t, "up", "--data-dir", dataDir, "--port", "0")
	code, out := second.waitExit(t, 30*time.Second)
	if code == 0 || !strings.Contains(out, "in use by another jobkeeper") {
		t.Errorf("second up on the same data dir: exit %d, output:\n%s", code, out)
	}
	oneLine(t, "second up", out)

	took := p.stop(t)
	t.Logf("stopped in %s", took)
	if !strings.Contains(p.output(), "jobkeeper stopped.") {
		t.Errorf("no clean stop message; output:\n%s", p.output())
	}

	p2, c2, _ := startUp(t, dataDir)
	got, err := c2.BatchV1().Jobs(ns).Get(ctx, kept.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Job created before the restart: %v", err)
	}
	if got.UID != kept.UID {
		t.Errorf("Job UID changed across restart: %s != %s", got.UID, kept.UID)
	}
	// Stopped soon after it started (its node agent may still be starting):
	// its cgroups go all the same.
	p2.stop(t)
	if left := cgroupRootLeft(dataDir); left != "" {
		t.Errorf("up left its cgroups at %s after a clean stop", left)
	}
}

func pollGone(t *testing.T, get func(ctx context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		t.Fatalf("object not deleted: %v", err)
	}
}

// TestUpBadInput checks that each kind of bad input is a one-line error,
// a non-zero exit, and leaves nothing behind.
func TestUpBadInput(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	base := t.TempDir()
	file := filepath.Join(base, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(base, "junk-kubeconfig")
	if err := os.WriteFile(junk, []byte("clusters: [not a kubeconfig\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args    []string
		wantErr string
		absent  string
	}{
		"unwritable data dir": {
			args:    []string{"--data-dir", filepath.Join(file, "data")},
			wantErr: "data directory",
		},
		"port in use": {
			args:    []string{"--data-dir", filepath.Join(base, "port"), "--port", itoa(busyPort)},
			wantErr: "already in use",
			absent:  filepath.Join(base, "port"),
		},
		"kubeconfig in a missing directory": {
			args:    []string{"--data-dir", filepath.Join(base, "kc"), "--kubeconfig-out", filepath.Join(base, "missing", "kubeconfig")},
			wantErr: "does not exist",
			absent:  filepath.Join(base, "kc"),
		},
		"kubeconfig is a directory": {
			args:    []string{"--data-dir", filepath.Join(base, "kcdir"), "--kubeconfig-out", base},
			wantErr: "is a directory",
			absent:  filepath.Join(base, "kcdir"),
		},
		"kubeconfig is not a kubeconfig": {
			args:    []string{"--data-dir", filepath.Join(base, "junk"), "--kubeconfig-out", junk},
			wantErr: "not a valid kubeconfig",
			absent:  filepath.Join(base, "junk"),
		},
		"invalid controller flag": {
			args:    []string{"--data-dir", filepath.Join(base, "flag"), "--concurrent-job-syncs", "0"},
			wantErr: "--concurrent-job-syncs",
			absent:  filepath.Join(base, "flag"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := start(t, append([]string{"up"}, tc.args...)...)
			code, out := p.waitExit(t, 30*time.Second)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; output:\n%s", out)
			}
			if !strings.Contains(out, tc.wantErr) {
				t.Errorf("output %q does not name the problem (%q)", out, tc.wantErr)
			}
			oneLine(t, name, out)
			if tc.absent != "" {
				if _, err := os.Stat(tc.absent); err == nil {
					t.Errorf("%s was created despite the bad input", tc.absent)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
