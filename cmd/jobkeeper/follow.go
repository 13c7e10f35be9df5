package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/follow"
)

// exitError ends the process with code after printing err, if any (main
// prints it).
type exitError struct {
	// code is the exit code.
	code int
	// err is printed when set.
	err error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError turns cobra's argument and flag errors into follow.ExitError,
// so that exit 1 always means a failed Job.
func usageError(_ *cobra.Command, err error) error {
	return &exitError{code: follow.ExitError, err: err}
}

// clientFlags are kubectl's flags for choosing a cluster and namespace.
type clientFlags struct {
	// kubeconfig, context and namespace are --kubeconfig, --context and -n.
	kubeconfig, context, namespace string
}

func (f *clientFlags) addTo(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster configuration).")
	fs.StringVar(&f.context, "context", "", "The kubeconfig context to use (default: its current context).")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "Namespace of the Job (default: the context's namespace, else default).")
}

// client loads the kubeconfig as kubectl does and returns a clientset and
// the namespace: -n, else the context's, else "default".
func (f *clientFlags) client() (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	config, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	config.UserAgent = "jobkeeper-follow"
	// kubectl's client limits: with --logs every pod costs a request, and
	// client-go's default of 5 per second would hold the lines back.
	config.QPS, config.Burst = 50, 300
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

// watchFlags are the options of follow and run that shape the output.
type watchFlags struct {
	// logs is --logs.
	logs bool
	// plain is --plain: lines even on a terminal.
	plain bool
	// maxLogRequests is --max-log-requests.
	maxLogRequests int
}

func (f *watchFlags) addTo(fs *pflag.FlagSet) {
	fs.BoolVar(&f.logs, "logs", false, "Stream the containers' logs, each line prefixed with [index N] (Indexed Jobs) or [pod/NAME].")
	fs.BoolVar(&f.plain, "plain", false, "Print plain timestamped lines even on a terminal (the default when stdout is not a terminal).")
	fs.IntVar(&f.maxLogRequests, "max-log-requests", 32, "With --logs, the most log streams open at once; more pods wait for a free one.")
}

// signals is a context cancelled by the first SIGINT or SIGTERM; a second
// one exits at once with the first one's code.
type signals struct {
	// ctx ends at the first signal.
	ctx context.Context
	// got is 128+signal number of the first signal, 0 before.
	got atomic.Int32
	// stop releases the handler.
	stop func()
}

func catchSignals() *signals {
	ctx, cancel := context.WithCancel(context.Background())
	s := &signals{ctx: ctx}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig, ok := <-ch
		if !ok {
			return
		}
		s.got.Store(128 + int32(sig.(syscall.Signal)))
		cancel()
		if _, ok := <-ch; ok {
			os.Exit(int(s.got.Load()))
		}
	}()
	s.stop = func() {
		signal.Stop(ch)
		close(ch)
		cancel()
	}
	return s
}

// watch follows the Job as the flags say, on cmd's output, and turns the
// outcome into the command's error (nil for a Complete Job). rm says the
// Job will be deleted afterwards (run --rm).
func watch(cmd *cobra.Command, sig *signals, client kubernetes.Interface, ns, name, uid string, f watchFlags, rm bool) error {
	out := cmd.OutOrStdout()
	opts := follow.Options{Namespace: ns, Name: name, Logs: f.logs, MaxLogStreams: f.maxLogRequests}
	opts.UID = types.UID(uid)
	d := follow.Display{Out: out, Interactive: !f.plain && isTerminal(out)}
	if d.Interactive && !klog.V(1).Enabled() {
		// client-go's own log lines (throttling, watch retries) would tear
		// the live view: drop them unless -v asks for them.
		klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	}
	st, stopped, err := follow.Watch(sig.ctx, client, opts, d)
	if code := sig.got.Load(); code != 0 || stopped {
		if code == 0 {
			code = follow.ExitInterrupted
		}
		if !d.Interactive {
			fmt.Fprintf(out, "%s stopped following job %s/%s\n", time.Now().Format(time.RFC3339), ns, name)
		}
		if !rm {
			fmt.Fprintf(out, "job.batch/%s goes on: jobkeeper follow -n %s %s\n", name, ns, name)
		}
		return &exitError{code: int(code)}
	}
	if err != nil {
		return &exitError{code: follow.ExitError, err: err}
	}
	if st.Outcome != follow.Complete {
		return &exitError{code: st.Outcome.ExitCode()}
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// jobName accepts NAME, job/NAME, jobs/NAME and job.batch/NAME.
func jobName(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, nil
	}
	switch kind {
	case "job", "jobs", "job.batch", "jobs.batch":
		if name != "" {
			return name, nil
		}
	}
	return "", fmt.Errorf("%q is not a Job: give NAME or job/NAME", arg)
}

// newFollowCommand is `follow JOB`.
func newFollowCommand() *cobra.Command {
	var cf clientFlags
	var wf watchFlags
	cmd := &cobra.Command{
		Use:   "follow JOB",
		Short: "Show a Job's progress live until it finishes; exit 0 if it completes, 1 if it fails",
		Long: `Follow a Job on any cluster until it finishes: a progress bar of succeeded pods against
completions; active, ready, terminating and failed pods; the elapsed time; for an Indexed Job a map of
its indexes (succeeded, running, pending, failed); its conditions with their reasons; and the Warning
events of the Job and its pods as they arrive. --logs streams the containers' logs too.

On a terminal the view is redrawn in place (Ctrl-C or q stops following). When stdout is not a
terminal (or with --plain) it prints one timestamped line per change.

Exit codes: 0 the Job completed; 1 it failed (its reason and message are printed); 2 it could not be
followed (not found, bad kubeconfig, API errors); 3 it was deleted before it finished; 130 Ctrl-C,
143 SIGTERM. A suspended Job is shown as such and followed on.`,
		Example: `  jobkeeper follow -n demo big
  jobkeeper follow job/big --logs --plain | tee big.log`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(cmd, fmt.Errorf("follow takes one Job name, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := jobName(args[0])
			if err != nil {
				return usageError(cmd, err)
			}
			client, ns, err := cf.client()
			if err != nil {
				return &exitError{code: follow.ExitError, err: err}
			}
			sig := catchSignals()
			defer sig.stop()
			return watch(cmd, sig, client, ns, name, "", wf, false)
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	cf.addTo(cmd.Flags())
	wf.addTo(cmd.Flags())
	return cmd
}

// newRunCommand is `run -f job.yaml`.
func newRunCommand() *cobra.Command {
	var cf clientFlags
	var wf watchFlags
	var file string
	var rm bool
	cmd := &cobra.Command{
		Use:   "run -f FILE",
		Short: "Create a Job from a file and follow it; the exit code is the Job's result",
		Long: `Create the batch/v1 Job in FILE (YAML or JSON; "-" reads standard input;
metadata.generateName is honoured) and follow it as "jobkeeper follow" does. Its exit code is the
Job's result: 0 Complete, 1 Failed, 3 deleted, 2 when it could not be created or followed, 130 or
143 when interrupted. --rm deletes the Job once following ends, its pods with it (background
propagation), whatever the result and also after Ctrl-C.

The file must hold exactly one batch/v1 Job; any other kind, several objects or a field a Job does
not have is refused before anything is created. Namespace: the Job's own, else -n, else the
kubeconfig context's.`,
		Example: `  jobkeeper run -f job.yaml
  jobkeeper run -f job.yaml --logs --rm -n ci`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError(cmd, fmt.Errorf("run takes no arguments (the Job comes from -f FILE), got %q", args))
			}
			if file == "" {
				return usageError(cmd, errors.New("-f FILE is required"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			job, err := readJob(cmd.InOrStdin(), file)
			if err != nil {
				return &exitError{code: follow.ExitError, err: err}
			}
			client, ctxNS, err := cf.client()
			if err != nil {
				return &exitError{code: follow.ExitError, err: err}
			}
			ns, err := follow.ResolveNamespace(job.Namespace, ctxNS, cf.namespace != "")
			if err != nil {
				return &exitError{code: follow.ExitError, err: err}
			}
			sig := catchSignals()
			defer sig.stop()
			created, err := follow.Create(sig.ctx, client, job, ns)
			if err != nil {
				return &exitError{code: follow.ExitError, err: err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "job.batch/%s created\n", created.Name)
			result := watch(cmd, sig, client, ns, created.Name, string(created.UID), wf, rm)
			if rm {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := follow.Delete(ctx, client, created); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "jobkeeper: %v\n", err)
				} else {
					fmt.Fprintf(out, "job.batch/%s deleted\n", created.Name)
				}
			}
			return result
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	cmd.Flags().StringVarP(&file, "filename", "f", "", `File holding the Job ("-": standard input).`)
	cmd.Flags().BoolVar(&rm, "rm", false, "Delete the Job (and, through the garbage collector, its pods) once following ends.")
	cf.addTo(cmd.Flags())
	wf.addTo(cmd.Flags())
	return cmd
}

// readJob reads and decodes the Job of file ("-": in).
func readJob(in io.Reader, file string) (*batchv1.Job, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	job, err := follow.DecodeJob(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return job, nil
}
