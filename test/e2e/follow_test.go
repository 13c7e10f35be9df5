package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// followTimeout bounds one `jobkeeper run` or `jobkeeper follow` of a small Job.
const followTimeout = 2 * time.Minute

// plainLine is a status line of the plain output: an RFC 3339 time, a space.
var plainLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) \S`)

// writeJob writes job as YAML into a temporary file and returns its path.
func writeJob(t *testing.T, job *batchv1.Job) string {
	t.Helper()
	data, err := yaml.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunFollow is the acceptance test of `jobkeeper run -f` and `jobkeeper
// follow` against `jobkeeper up`, whose node agent runs the pods as shell
// commands. The binary's stdout is a pipe in most subtests, so it prints
// plain lines; one runs it on a pseudo-terminal.
func TestRunFollow(t *testing.T) {
	up, c, kc := startUp(t, t.TempDir())
	defer up.stop(t)
	ctx := context.Background()
	jk := func(args ...string) *process {
		return start(t, append(args, "--kubeconfig", kc)...)
	}

	t.Run("run exits 0 on a Job that completes, --rm deletes it", func(t *testing.T) {
		ns := createTestNamespace(t, c, "run-ok")
		job := builder.MakeJob("", "").Completions(2).Parallelism(2).Command("/bin/sh", "-c", "echo hi").Obj()
		job.GenerateName = "ok-"
		code, out := jk("run", "-f", writeJob(t, job), "-n", ns, "--rm").waitExit(t, followTimeout)
		if code != 0 {
			t.Fatalf("exit code %d, want 0; output:\n%s", code, out)
		}
		m := regexp.MustCompile(`(?m)^job\.batch/(ok-\w+) created$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no created line with a generated name; output:\n%s", out)
		}
		for _, want := range []string{" job " + ns + "/" + m[1] + " complete: 2/2 succeeded in ", "job.batch/" + m[1] + " deleted"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		pollGone(t, func(ctx context.Context) error {
			_, err := c.BatchV1().Jobs(ns).Get(ctx, m[1], metav1.GetOptions{})
			return err
		})
	})

	t.Run("run exits 1 on a Job that fails, printing the reason and the failed pod", func(t *testing.T) {
		ns := createTestNamespace(t, c, "run-fail")
		job := builder.MakeJob("failing", ns).BackoffLimit(0).Command("/bin/sh", "-c", "echo about to fail; exit 3").Obj()
		code, out := jk("run", "-f", writeJob(t, job), "--logs").waitExit(t, followTimeout)
		if code != 1 {
			t.Fatalf("exit code %d, want 1; output:\n%s", code, out)
		}
		for _, want := range []string{
			"job " + ns + "/failing failed after ",
			": BackoffLimitExceeded: Job has reached the specified backoff limit",
			"condition Failed=True (BackoffLimitExceeded)",
			"] about to fail\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// The pod that failed, its container and exit code, before the
		// last line.
		failedPod := regexp.MustCompile(`(?m)^\S+ failed pod/failing-\w+: container main exit code 3 \(Error\)\n\S+ job ` + ns + `/failing failed after `)
		if !failedPod.MatchString(out) {
			t.Errorf("output does not name the failed pod and its exit code before the last line:\n%s", out)
		}
	})

	t.Run("an Indexed Job's failed indexes are named with their pods", func(t *testing.T) {
		ns := createTestNamespace(t, c, "run-fail-indexed")
		job := builder.MakeJob("indexes", ns).Indexed().Completions(3).Parallelism(3).
			Command("/bin/sh", "-c", `[ "$JOB_COMPLETION_INDEX" != 1 ] || exit 42`).Obj()
		job.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
		code, out := jk("run", "-f", writeJob(t, job)).waitExit(t, followTimeout)
		if code != 1 {
			t.Fatalf("exit code %d, want 1; output:\n%s", code, out)
		}
		failedPod := regexp.MustCompile(`(?m) failed pod/indexes-1-\w+ \[index 1\]: container main exit code 42 \(Error\)$`)
		if !failedPod.MatchString(out) || !strings.Contains(out, ": FailedIndexes: Job has failed indexes") {
			t.Errorf("output does not name index 1's failed pod and its exit code:\n%s", out)
		}
	})

	t.Run("follow --logs prints each index's output once", func(t *testing.T) {
		ns := createTestNamespace(t, c, "follow-logs")
		// One pod at a time, so that follow sees pods created after it started.
		job := builder.MakeJob("indexed", ns).Indexed().Completions(3).Parallelism(1).
			Command("/bin/sh", "-c", "echo start of $JOB_COMPLETION_INDEX; sleep 1; echo end of $JOB_COMPLETION_INDEX").Obj()
		if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		code, out := jk("follow", "--logs", "-n", ns, "job/indexed").waitExit(t, followTimeout)
		if code != 0 {
			t.Fatalf("exit code %d, want 0; output:\n%s", code, out)
		}
		for _, i := range []string{"0", "1", "2"} {
			for _, want := range []string{"[index " + i + "] start of " + i + "\n", "[index " + i + "] end of " + i + "\n"} {
				if n := strings.Count(out, want); n != 1 {
					t.Errorf("%q printed %d times, want once; output:\n%s", want, n, out)
				}
			}
		}
	})

	t.Run("a non-TTY run prints plain lines", func(t *testing.T) {
		ns := createTestNamespace(t, c, "run-plain")
		job := builder.MakeJob("plain", ns).Indexed().Completions(4).Parallelism(2).Command("/bin/sh", "-c", "sleep 0.5").Obj()
		code, out := jk("run", "-f", writeJob(t, job)).waitExit(t, followTimeout)
		if code != 0 {
			t.Fatalf("exit code %d, want 0; output:\n%s", code, out)
		}
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("plain output holds escape sequences or carriage returns: %q", out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if lines[0] != "job.batch/plain created" {
			t.Errorf("first line %q, want job.batch/plain created", lines[0])
		}
		for _, l := range lines[1:] {
			if !plainLine.MatchString(l) {
				t.Errorf("line %q is not timestamped", l)
			}
		}
		for _, want := range []string{
			" job " + ns + "/plain: Indexed, 4 completions, parallelism 2\n",
			" progress: succeeded 0/4, failed 0, active ",
			" indexes: succeeded 0-3\n",
			" condition Complete=True (CompletionsReached): Reached expected number of succeeded pods\n",
			" job " + ns + "/plain complete: 4/4 succeeded in ",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("a suspended Job is followed until it completes", func(t *testing.T) {
		ns := createTestNamespace(t, c, "follow-suspended")
		job := builder.MakeJob("later", ns).Suspend(true).Command("/bin/sh", "-c", "true").Obj()
		if _, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := jk("follow", "-n", ns, "later")
		p.waitForOutput(t, regexp.MustCompile(`condition Suspended=True \(JobSuspended\)`), followTimeout)
		if _, err := c.BatchV1().Jobs(ns).Patch(ctx, "later", types.MergePatchType, []byte(`{"spec":{"suspend":false}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		code, out := p.waitExit(t, followTimeout)
		if code != 0 || !strings.Contains(out, "job resumed") || !strings.Contains(out, "complete: 1/1 succeeded") {
			t.Errorf("exit code %d, want 0 after a resume; output:\n%s", code, out)
		}
	})

	t.Run("follow exits 3 when the Job is deleted", func(t *testing.T) {
		ns := createTestNamespace(t, c, "follow-deleted")
		createSleeper(t, c, ns)
		p := jk("follow", "-n", ns, "sleeper")
		p.waitForOutput(t, regexp.MustCompile(`progress: succeeded 0/1, failed 0, active 1`), followTimeout)
		bg := metav1.DeletePropagationBackground
		if err := c.BatchV1().Jobs(ns).Delete(ctx, "sleeper", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		code, out := p.waitExit(t, followTimeout)
		if code != 3 || !strings.Contains(out, "job "+ns+"/sleeper was deleted before it finished") {
			t.Errorf("exit code %d, want 3 and a deleted line; output:\n%s", code, out)
		}
	})

	t.Run("follow exits 130 on SIGINT and leaves the Job", func(t *testing.T) {
		ns := createTestNamespace(t, c, "follow-sigint")
		createSleeper(t, c, ns)
		p := jk("follow", "-n", ns, "sleeper")
		p.waitForOutput(t, regexp.MustCompile(`progress: `), followTimeout)
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		code, out := p.waitExit(t, stopTimeout)
		if code != 130 || !strings.Contains(out, "stopped following job "+ns+"/sleeper") {
			t.Errorf("exit code %d, want 130; output:\n%s", code, out)
		}
		if _, err := c.BatchV1().Jobs(ns).Get(ctx, "sleeper", metav1.GetOptions{}); err != nil {
			t.Errorf("the Job is gone after follow was interrupted: %v", err)
		}
	})

	t.Run("on a terminal it draws the live view", func(t *testing.T) { runOnATerminal(t, c, kc) })

	t.Run("errors exit 2", func(t *testing.T) {
		deployment := filepath.Join(t.TempDir(), "d.yaml")
		if err := os.WriteFile(deployment, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for what, tc := range map[string]struct {
			args []string
			want string
		}{
			"a file that is not a Job": {args: []string{"run", "-f", deployment}, want: "the file holds apps/v1 Deployment: want a batch/v1 Job"},
			"a missing Job":            {args: []string{"follow", "-n", "default", "nosuch"}, want: "job default/nosuch: not found"},
			"no Job name":              {args: []string{"follow"}, want: "follow takes one Job name"},
		} {
			code, out := jk(tc.args...).waitExit(t, followTimeout)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("%s: exit code %d, want 2 and %q; output:\n%s", what, code, tc.want, out)
			}
			oneLine(t, what, out)
		}
	})
}

// createSleeper creates the Job "sleeper", whose one pod sleeps 5 minutes.
func createSleeper(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	job := builder.MakeJob("sleeper", ns).Command("/bin/sh", "-c", "sleep 300").Obj()
	if _, err := c.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runOnATerminal runs `jobkeeper run` on a pseudo-terminal: it draws the
// live view (escape sequences, no timestamped lines) and still exits with
// the Job's result.
func runOnATerminal(t *testing.T, c kubernetes.Interface, kc string) {
	ns := createTestNamespace(t, c, "follow-tty")
	job := builder.MakeJob("tty", ns).Indexed().Completions(6).Parallelism(3).Command("/bin/sh", "-c", "sleep 0.5").Obj()
	cmd := exec.Command(binary, "run", "-f", writeJob(t, job), "--kubeconfig", kc)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		// Play the terminal: answer the cursor position query that
		// bubbletea's start-up (termenv) sends, as every terminal does.
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			out.Write(buf[:n])
			if bytes.Contains(buf[:n], []byte("\x1b[6n")) {
				_, _ = tty.Write([]byte("\x1b[1;1R"))
			}
			if err != nil { // EIO once the child has exited
				break
			}
		}
		close(copied)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(followTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("jobkeeper run did not exit on a terminal")
	}
	<-copied
	if err != nil {
		t.Fatalf("jobkeeper run on a terminal: %v; output:\n%q", err, out.String())
	}
	screen := out.String()
	for _, want := range []string{"\x1b[", "COMPLETE", "job " + ns + "/tty", "6/6 100%", "job " + ns + "/tty complete: 6/6 succeeded in "} {
		if !strings.Contains(screen, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, screen)
		}
	}
	if plainLine.MatchString(strings.TrimPrefix(screen, "job.batch/tty created\r\n")) {
		t.Errorf("terminal output is plain lines:\n%q", screen)
	}
}
