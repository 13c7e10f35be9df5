package follow

import (
	"context"
	"fmt"
	"io"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// FieldManager is the field manager of the Jobs `run` creates.
const FieldManager = "jobkeeper-run"

// Display says where Watch shows the Job.
type Display struct {
	// Out receives the view or the lines.
	Out io.Writer
	// In gives the keys of the interactive view (nil: standard input).
	In io.Reader
	// Interactive selects the live view (TUI) over plain lines; set it
	// when Out is a terminal.
	Interactive bool
	// Clock stamps plain lines. Default: the real clock.
	Clock clock.PassiveClock
}

// Watch follows a Job (see Follow) and shows it on d. It returns the last
// State; stopped is true when the user stopped following from the live
// view (Ctrl-C or q), before the Job finished.
func Watch(ctx context.Context, client kubernetes.Interface, opts Options, d Display) (st State, stopped bool, err error) {
	if !d.Interactive {
		c := d.Clock
		if c == nil {
			c = clock.RealClock{}
		}
		st, err = Follow(ctx, client, opts, NewPlain(d.Out, c))
		return st, false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tui := NewTUI(ctx, d.In, d.Out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st, err = Follow(ctx, client, opts, tui)
		tui.Finish()
	}()
	stopped, runErr := tui.Run()
	cancel()
	<-done
	if runErr != nil {
		return st, false, fmt.Errorf("drawing on the terminal: %w", runErr)
	}
	if stopped && !st.Finished() {
		return st, true, nil
	}
	return st, false, err
}

// ResolveNamespace picks the namespace of a Job from a file, as kubectl
// does: the file's own namespace, unless -n says another (an error); with
// none in the file, -n or else the kubeconfig context's namespace
// (contextNS, which is already -n when given).
func ResolveNamespace(fileNS, contextNS string, flagGiven bool) (string, error) {
	switch {
	case fileNS == "":
		return contextNS, nil
	case flagGiven && fileNS != contextNS:
		return "", fmt.Errorf("the Job's namespace %q does not match --namespace %q", fileNS, contextNS)
	default:
		return fileNS, nil
	}
}

// Create creates job in namespace (metadata.generateName is honoured: the
// returned Job has the generated name), asking the apiserver to refuse
// unknown fields.
func Create(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, namespace string) (*batchv1.Job, error) {
	job = job.DeepCopy()
	job.Namespace = namespace
	created, err := client.BatchV1().Jobs(namespace).Create(ctx, job, metav1.CreateOptions{
		FieldManager: FieldManager, FieldValidation: metav1.FieldValidationStrict,
	})
	if err != nil {
		name := job.Name
		if name == "" {
			name = job.GenerateName + "*"
		}
		return nil, fmt.Errorf("creating job %s/%s: %w", namespace, name, err)
	}
	return created, nil
}

// Delete deletes the Job with background propagation (the garbage
// collector deletes its pods afterwards), only if it is still the one
// with job's UID. A Job already gone is not an error.
func Delete(ctx context.Context, client kubernetes.Interface, job *batchv1.Job) error {
	bg := metav1.DeletePropagationBackground
	err := client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: &bg, Preconditions: metav1.NewUIDPreconditions(string(job.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}
