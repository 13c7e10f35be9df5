package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// NewControllerCommand is `controller`: jobkeeper's controllers against an
// existing cluster. Both binaries have it (cmd/jobkeeper and the lean
// cmd/jobkeeper-controller); use names the command.
func NewControllerCommand(use string) *cobra.Command {
	fs, opts, kubeconfig := ControllerFlags()
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the controllers against an existing cluster",
		Long: `Run jobkeeper's controllers against the cluster of --kubeconfig (or the in-cluster
configuration when running in a pod). The Job controller manages the Jobs whose spec.managedBy
is --managed-by; the TTL-after-finished controller cleans up finished objects.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			config, err := LoadClientConfig(*kubeconfig)
			if err != nil {
				return err
			}
			m, err := manager.New(config, opts)
			if err != nil {
				return err
			}
			ctx, stop := SignalContext()
			defer stop()
			return m.Run(ctx)
		},
	}
	cmd.Flags().AddFlagSet(fs)
	return cmd
}

// ControllerFlags are the controller command's flags, bound to the
// options (with the command's defaults) and to the kubeconfig path it
// runs with: what the command parses, for a benchmark that runs the
// controllers as a user does.
func ControllerFlags() (*pflag.FlagSet, *manager.Options, *string) {
	opts := manager.NewOptions()
	// In a pod, the Lease lives next to the Deployment unless a flag says
	// otherwise (the chart sets POD_NAMESPACE from the downward API).
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		opts.LeaderElectionNamespace = ns
	}
	// Unlike `up`, whose apiserver is the v1.36 it embeds, a cluster may be
	// older or have turned off a Job feature the Job controller relies on.
	opts.ServerCheck = true
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig. Empty: $KUBECONFIG, then the in-cluster configuration.")
	AddControllerFlags(fs, opts)
	fs.BoolVar(&opts.ServerCheck, "server-check", opts.ServerCheck, "With the Job controller: before starting, check that the apiserver is Kubernetes "+
		manager.MinServerVersion.String()+" or later and keeps the Job fields the controller relies on (a dry-run create of a Job in the leader election namespace), and refuse to start, saying what is missing, if not.")
	return fs, opts, kubeconfig
}

// LoadClientConfig reads the kubeconfig at path, or $KUBECONFIG, or falls
// back to the in-cluster configuration.
func LoadClientConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a cluster: %w", err)
		}
		return c, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, unwrapPathErr(err))
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// SignalContext is cancelled by the first SIGINT or SIGTERM; a second one
// exits at once.
func SignalContext() (context.Context, context.CancelFunc) { return SignalContextAfter(0) }

// SignalContextAfter is SignalContext where a second signal within window
// of the first is taken as the same stop (a process that gets the stop
// both from its supervisor and from a parent passing it on): only one
// after that exits at once.
func SignalContextAfter(window time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-ch
		first := time.Now()
		klog.Background().Info("Shutting down", "signal", s.String())
		cancel()
		for s = range ch {
			if time.Since(first) >= window {
				break
			}
			klog.Background().Info("Already shutting down", "signal", s.String())
		}
		os.Exit(1)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
