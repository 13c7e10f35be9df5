package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// current is the control plane of this test package, set by Main.
var current *controlplane.ControlPlane

// Main starts the control plane, runs the package's tests and stops it.
// Call it from TestMain. The control plane's logs go to a file whose path is
// printed when a test fails (set JOBKEEPER_TEST_KEEP=1 to keep the data dir).
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jobkeeper-it-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		return 1
	}
	logPath := filepath.Join(dir, "logs", "test.log")
	logFile, err := controlplane.RedirectKlog(logPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: %v\n", err)
		return 1
	}
	defer logFile.Close()
	cp, err := controlplane.Start(context.Background(), controlplane.Config{DataDir: dir})
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: starting control plane: %v (logs: %s)\n", err, logPath)
		return 1
	}
	current = cp
	code := m.Run()
	cp.Stop()
	if code != 0 || os.Getenv("JOBKEEPER_TEST_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "framework: control plane data and logs kept in %s\n", dir)
	} else {
		os.RemoveAll(dir)
	}
	return code
}

// ControlPlane returns the running control plane (for tests that need its
// PKI or data directory).
func ControlPlane() *controlplane.ControlPlane {
	if current == nil {
		panic("framework: no control plane; call framework.Main from TestMain")
	}
	return current
}

// Config returns a fresh admin client configuration.
func Config() *rest.Config {
	return ControlPlane().AdminConfig()
}

// Client returns an admin clientset.
func Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(Config())
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	return c
}

var invalidNameChars = regexp.MustCompile(`[^a-z0-9-]+`)

// CreateNamespace creates a namespace named after the test and deletes it
// when the test ends.
func CreateNamespace(t testing.TB) string {
	t.Helper()
	base := invalidNameChars.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(base) > 50 {
		base = base[:50]
	}
	name := strings.Trim(base, "-") + "-" + utilrand.String(5)
	c := Client(t)
	_, err := c.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		// No namespace controller runs here, so this only marks it; the
		// objects stay in the throwaway control plane.
		_ = c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}
