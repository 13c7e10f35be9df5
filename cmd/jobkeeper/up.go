package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"jobkeeper.dev/jobkeeper/internal/cli"
	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// upOptions are the flags of `jobkeeper up` beyond the controller flags.
type upOptions struct {
	// dataDir holds etcd, certificates, logs and pod files.
	dataDir string
	// port is the apiserver's secure port on 127.0.0.1.
	port int
	// kubeconfigOut is where the admin kubeconfig is written.
	kubeconfigOut string
	// shutdownGrace is added to shutdownTimeout: the time the node agent
	// gives running pods on a clean stop.
	shutdownGrace time.Duration
	// localServices are aggregated APIs served in this process
	// (controlplane.Config.LocalServices).
	localServices map[types.NamespacedName]*url.URL
	// nodeIPs are the node agent's addresses besides loopback
	// (controlplane.Config.NodeIPs).
	nodeIPs []net.IP
}

// upComponent starts something that runs beside the control plane (the node
// agent, CRD installation, ...). It returns a function that waits for the
// component to stop after ctx is cancelled.
type upComponent func(ctx context.Context, cp *controlplane.ControlPlane) (wait func(), err error)

// bootstrapFunc creates objects in the control plane while it starts (see
// controlplane.Config.Bootstrap), before the components and the controllers.
type bootstrapFunc = func(ctx context.Context, admin *rest.Config) error

// localQPS and localBurst are the controllers' client limits under `up`.
const (
	localQPS   = 500
	localBurst = 1000
)

// hiddenUpFlags are controller flags that mean nothing under `up` (one
// process on one machine: no replicas to elect a leader among, and no other
// Job controller for plain Jobs to be left to). They are still accepted, so
// scripts that pass them keep working, but `up --help` does not list them.
var hiddenUpFlags = []string{
	"leader-elect",
	"leader-elect-resource-namespace",
	"leader-elect-resource-name",
	"leader-elect-lease-duration",
	"leader-elect-renew-deadline",
	"leader-elect-retry-period",
	"manage-unclaimed-jobs",
}

// shutdownTimeout bounds the whole shutdown after a signal.
const shutdownTimeout = 10 * time.Second

func newUpCommand() *cobra.Command {
	opts := manager.NewOptions()
	opts.ManageUnclaimedJobs = true
	// The apiserver is on loopback in this process, so kube-controller-manager's
	// 50/100, meant to protect a shared apiserver, only slows Jobs down. Above
	// 500/1000 the run is bound by the apiserver's CPU, not by the limit
	// (10,000 pods on 2 cores: 62s at 500/1000, 67s at 1000/2000, 82s at
	// 2000/4000; bench/headline.sh, docs/benchmarks.md).
	opts.KubeAPIQPS, opts.KubeAPIBurst = localQPS, localBurst
	opts.MetricsBindAddress = "127.0.0.1:0"
	opts.HealthProbeBindAddress = "127.0.0.1:0"
	up := &upOptions{port: controlplane.DefaultPort}
	node := &nodeAgentFlags{}
	if home, err := os.UserHomeDir(); err == nil {
		up.dataDir = filepath.Join(home, ".jobkeeper")
	}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run an embedded control plane with jobkeeper's controllers on this machine",
		Long: `Start etcd, kube-apiserver and the garbage collector in this process, with jobkeeper's
controllers, and write an admin kubeconfig. Objects are kept in --data-dir across restarts;
jobkeeper reset removes them. Stop with Ctrl-C (SIGINT) or SIGTERM: running pods are then stopped
as in a graceful node shutdown (DisruptionTarget, --shutdown-grace-period), unless
--keep-running-on-stop; after a crash or kill -9 their containers run on and the next up on the same
--data-dir takes them over.

What up runs:
` + wrap(upRuns+".", 96, "  ") + `
What it accepts with a warning:
` + wrap(upWarns()+": nothing here routes, serves or enforces them; each creation gets a warning (kubectl prints it) saying so.", 96, "  ") + `
What it refuses:
` + wrap(upRefuses+", with --network=host (the default as another user): their pods would share this host's network, so an admission policy refuses their creation, with a message saying so. With --network=pod (the default as root) upstream's controllers run them, started when the first such object appears.", 96, "  ") + `

A local node agent runs the pods on this machine. By default (--images=oci) each container runs
its image: its root filesystem is the image, pulled from its registry into <data-dir>/images or
loaded with "jobkeeper image load FILE", and its writes stay in the container. With --images=host a
container's command (or its args when it has no command) runs on this host's own programs instead,
copy-on-write (no image is pulled). Either mode needs root, or unprivileged user and mount
namespaces, to give each container a private view with its emptyDir, configMap, secret,
downwardAPI, projected, hostPath and persistentVolumeClaim volumes mounted in it; where the
machine allows neither, --images=oci refuses to start and --images=host (or --pod-isolation=off)
refuses pods with volumes, with an event. The start-up banner says which mode is in use.
Whoever can create pods runs commands on this host as the user running jobkeeper up.

The kubeconfig (--kubeconfig-out) is merged into an existing file: its cluster, user and context
named "` + controlplane.ContextName + `" are added or replaced and made current; other entries are kept.
It holds the admin's credentials, so it is written with mode 0600: up tightens an existing file
open to other users to 0600, and a data directory open to them to 0700, and says so.
Logs of all components are in <data-dir>/logs, each rotated at ` + strconv.Itoa(controlplane.LogMaxSizeMB) + ` MB with ` + strconv.Itoa(controlplane.LogMaxBackups) + ` compressed
backups kept.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if abs, err := filepath.Abs(up.dataDir); err == nil {
				node.dataDir = abs
			}
			if err := node.validate(); err != nil {
				return err
			}
			if node.enabled && node.network == networkPod && !canNetworkPods() {
				// As a user: up runs again in the rootless node.
				if err := up.validate(opts); err != nil {
					return err
				}
				return runRootlessNode(up, opts.MetricsBindAddress, node.cidr)
			}
			if inRootlessNode {
				if err := up.validate(opts); err != nil {
					return err
				}
				stopPasta, err := enterRootlessNode(up.dataDir)
				defer stopPasta()
				if err != nil {
					return err
				}
			}
			up.shutdownGrace = node.shutdownGrace()
			// Without the node agent there is no pod network, whatever
			// --network says.
			network := node.network
			if !node.enabled {
				network = networkHost
			}
			bootstrap := []bootstrapFunc{installCRDs, installRefusals(network)}
			if node.enabled {
				// The resource metrics API (kubectl top) from the node
				// agent's samples.
				m, err := newMetricsAPI()
				if err != nil {
					return err
				}
				defer func() { _ = m.ln.Close() }()
				node.metrics, up.localServices = m, m.localServices()
				bootstrap = append(bootstrap, m.register)
			}
			components := []upComponent{runLocalControllers, node.volumesComponent(), node.component(cmd.OutOrStdout())}
			if network == networkPod {
				components = append(components, runWorkloadsOnDemand)
				up.nodeIPs = []net.IP{net.IP(nodeAddress(node.cidr).AsSlice())}
			}
			return runUp(cmd.OutOrStdout(), up, opts, bootstrap, components)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&up.dataDir, "data-dir", up.dataDir, "Directory for etcd data, certificates, logs and pod files.")
	fs.IntVar(&up.port, "port", up.port, "Secure port of the kube-apiserver on 127.0.0.1; 0 picks a free port, keeping the one this --data-dir used last when it is free (the banner says when the port is new: kubeconfigs written earlier then name the old one).")
	fs.StringVar(&up.kubeconfigOut, "kubeconfig-out", "", "Where to write the admin kubeconfig (default <data-dir>/kubeconfig).")
	cli.AddControllerFlags(fs, opts)
	node.addFlags(fs)
	for _, name := range hiddenUpFlags {
		if err := fs.MarkHidden(name); err != nil {
			panic(err)
		}
	}
	// Under up these are served over HTTPS behind the apiserver's
	// authentication and authorization (servedMetrics), not in plain HTTP.
	fs.Lookup("metrics-bind-address").Usage = "Address of the /metrics endpoint, served over HTTPS to callers the apiserver authenticates (client certificate of the cluster CA, or bearer token) and authorizes (get on the non-resource URL); port 0 picks a free port, \"0\" disables it."
	fs.Lookup("controllers").Usage = "Comma-separated controllers of jobkeeper to run: " + manager.JobController + ", " + manager.TTLAfterFinishedController +
		". Empty (--controllers=) runs none of them, so that a Job controller installed into this cluster (the Helm chart's) manages the Jobs, as on a real cluster; upstream's controllers and the node agent run either way."
	fs.Lookup("profiling").Usage = "Serve /debug/pprof on the metrics address, with the same authentication and authorization."
	return cmd
}

// wrap breaks text into lines of at most width characters (words longer
// than that stay whole), each starting with indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// validate checks the flags before anything is written.
func (u *upOptions) validate(opts *manager.Options) error {
	if u.dataDir == "" {
		return errors.New("--data-dir must be set (no home directory to default to)")
	}
	abs, err := filepath.Abs(u.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", u.dataDir, err)
	}
	u.dataDir = abs
	if u.kubeconfigOut == "" {
		u.kubeconfigOut = filepath.Join(u.dataDir, "kubeconfig")
	} else if u.kubeconfigOut, err = filepath.Abs(u.kubeconfigOut); err != nil {
		return fmt.Errorf("--kubeconfig-out: %w", err)
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if u.port < 0 || u.port > 65535 {
		return fmt.Errorf("--port %d is out of range 0-65535", u.port)
	}
	return nil
}

// runUp starts the control plane (with the bootstrap functions), then
// components in order, then the controllers, and stops them all on a signal.
func runUp(out io.Writer, up *upOptions, opts *manager.Options, bootstrap []bootstrapFunc, components []upComponent) error {
	if err := up.validate(opts); err != nil {
		return err
	}
	// The manager would serve /metrics (and pprof) in plain HTTP, to anyone
	// on this machine; up serves them itself, behind authentication.
	metricsAddr := opts.MetricsBindAddress
	opts.MetricsBindAddress = "0"
	// Check everything that can fail on bad input before writing anything.
	// The kubeconfig's directory is checked first unless it is the data
	// directory itself, which may not exist yet.
	if filepath.Dir(up.kubeconfigOut) != up.dataDir {
		if err := controlplane.CheckKubeconfigPath(up.kubeconfigOut); err != nil {
			return err
		}
	}
	// A second up on a data directory in use fails for that reason, not
	// for the port the first one holds.
	if err := controlplane.CheckDirLock(up.dataDir); err != nil {
		return err
	}
	if err := controlplane.CheckPort(up.port); err != nil {
		return err
	}
	if err := controlplane.EnsureWritableDir(up.dataDir); err != nil {
		return err
	}
	if err := controlplane.CheckKubeconfigPath(up.kubeconfigOut); err != nil {
		return err
	}
	logPath := filepath.Join(up.dataDir, "logs", "jobkeeper.log")
	logFile, err := controlplane.RedirectKlog(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()

	// The up inside the rootless node may get a stop twice at once: from
	// a supervisor that signals every process (systemd), and passed on by
	// the outer up, or from the lifeline (watchPasta).
	var signalWindow time.Duration
	if inRootlessNode {
		signalWindow = relayWindow
	}
	ctx, stop := cli.SignalContextAfter(signalWindow)
	defer stop()
	logger := klog.FromContext(ctx)
	started := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Config{
		DataDir:       up.dataDir,
		Port:          up.port,
		KubeconfigOut: up.kubeconfigOut,
		Bootstrap:     bootstrap,
		LocalServices: up.localServices,
		NodeIPs:       up.nodeIPs,
		// runLocalControllers runs the serviceaccount controller and the
		// root CA publisher, and the node agent mounts the token volume.
		ServiceAccountAdmission: true,
	})
	if err != nil {
		return err
	}
	defer cp.Stop()

	compCtx, cancelComponents := context.WithCancel(ctx)
	defer cancelComponents()
	var waits []func()
	logger.Info("Control plane started", "elapsed", time.Since(started))
	for i, start := range components {
		wait, err := start(compCtx, cp)
		if err != nil {
			cancelComponents()
			for _, w := range waits {
				w()
			}
			return err
		}
		waits = append(waits, wait)
		logger.Info("Component started", "index", i, "elapsed", time.Since(started))
	}

	servedMetrics, err := serveMetrics(compCtx, cp, metricsAddr, opts.EnableProfiling)
	if err == nil && servedMetrics != "" {
		var forget func()
		if forget, err = controlplane.WriteMetricsAddress(up.dataDir, servedMetrics); err == nil {
			defer forget()
		}
	}
	if err != nil {
		cancelComponents()
		for _, w := range waits {
			w()
		}
		return err
	}
	m, err := manager.New(cp.AdminConfig(), opts)
	if err != nil {
		return err
	}
	managerErr := make(chan error, 1)
	go func() { managerErr <- m.Run(compCtx) }()

	fmt.Fprintf(out, "jobkeeper is up in %.1fs: kube-apiserver at %s\n", time.Since(started).Seconds(), cp.URL())
	fmt.Fprintf(out, "Kubeconfig written to %s\n\n", cp.KubeconfigPath())
	fmt.Fprintf(out, "    export KUBECONFIG=%s\n    kubectl get nodes\n\n", cp.KubeconfigPath())
	if line := controllersBanner(opts.Controllers); line != "" {
		fmt.Fprintln(out, line)
	}
	if gates := cli.NonDefaultGates(); len(gates) > 0 {
		fmt.Fprintf(out, "Feature gates not at their v1.36 defaults (--feature-gates), for the apiserver, the controllers and the node: %s\n", strings.Join(gates, ","))
	}
	if servedMetrics != "" {
		fmt.Fprintf(out, "jobkeeper's metrics: https://%s/metrics (read them with: jobkeeper metrics%s)\n", servedMetrics, metricsCommandFlags(up.dataDir, up.kubeconfigOut))
	}
	for _, notice := range cp.Notices() {
		fmt.Fprintln(out, notice)
	}
	fmt.Fprintf(out, "Logs: %s. Stop with Ctrl-C.\n", logPath)

	var runErr error
	select {
	case <-ctx.Done():
	case <-cp.Failed():
		runErr = cp.Err()
	case err := <-managerErr:
		runErr = fmt.Errorf("controllers stopped: %w", err)
		managerErr <- nil
	}
	logger.Info("Stopping")
	done := make(chan struct{})
	go func() {
		defer close(done)
		cancelComponents()
		select {
		case <-managerErr:
		case <-time.After(3 * time.Second):
			logger.Info("Controllers did not stop within 3s")
		}
		for _, w := range waits {
			w()
		}
		cp.Stop()
	}()
	select {
	case <-done:
	case <-time.After(shutdownTimeout + up.shutdownGrace):
		runErr = errors.Join(runErr, fmt.Errorf("shutdown took longer than %s", shutdownTimeout+up.shutdownGrace))
	}
	if runErr == nil {
		fmt.Fprintln(out, "jobkeeper stopped.")
	}
	return runErr
}

// controllersBanner is the banner's line about jobkeeper's own controllers
// when --controllers leaves some out: which run, and who is left the rest.
// It is empty when all of them run.
func controllersBanner(controllers []string) string {
	if slices.Contains(controllers, manager.JobController) && slices.Contains(controllers, manager.TTLAfterFinishedController) {
		return ""
	}
	if len(controllers) == 0 {
		return "None of jobkeeper's controllers run (--controllers=): Jobs and their TTL-after-finished cleanup are left to a controller you install (e.g. the Helm chart's)."
	}
	return "jobkeeper's controllers running: " + strings.Join(controllers, ", ") + " (--controllers); the others are left to a controller you install."
}
