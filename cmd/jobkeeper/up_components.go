package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclientset "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"

	"jobkeeper.dev/jobkeeper/deploy/crds"
	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/metrics"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podnet"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
)

// installCRDs installs jobkeeper's CustomResourceDefinitions (TTLPolicy)
// before the controllers start watching them.
func installCRDs(ctx context.Context, admin *rest.Config) error {
	client, err := apiextensionsclientset.NewForConfig(admin)
	if err != nil {
		return err
	}
	if err := crds.Install(ctx, client); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	return nil
}

// nodeAgentFlags are the node agent's flags in `jobkeeper up`.
type nodeAgentFlags struct {
	// enabled runs the node agent at all.
	enabled bool
	// metrics is the resource metrics API served from the agent's
	// samples; nil when none.
	metrics *metricsAPI
	// opts are the agent's options; certificate and data paths are filled in
	// from the control plane.
	opts nodeagent.Options
	// extended are --extended-resource's NAME=COUNT pairs.
	extended map[string]int64
	// reserved are --system-reserved's NAME=QUANTITY pairs.
	reserved map[string]string
	// network is --network: networkPod or networkHost; networkWhy says
	// why the default fell back to the host's.
	network, networkWhy string
	// dataDir is up's data directory, for the pod network's lock.
	dataDir string
	// podCIDR is --pod-cidr, parsed into cidr.
	podCIDR string
	cidr    netip.Prefix
}

func (f *nodeAgentFlags) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&f.enabled, "node-agent", true, "Run the local node agent, which runs pods on this machine.")
	fs.StringVar(&f.opts.NodeName, "node-name", "", "Name of the local Node (default: the host name).")
	fs.IntVar(&f.opts.MaxPods, "max-pods", nodeagent.DefaultMaxPods, "Pod capacity of the local Node.")
	fs.StringVar(&f.opts.Runtime, "runtime", nodeagent.DefaultRuntime, "How pods run: \"process\" (container commands as host processes) or \"simulated\" (outcome and duration from pod annotations).")
	fs.DurationVar(&f.opts.SyncFrequency, "sync-frequency", nodeagent.DefaultSyncFrequency, "How often the node agent refreshes the files of running pods' configMap, secret, downwardAPI and projected volumes (the kubelet's --sync-frequency).")
	fs.IntVar(&f.opts.KubeletPort, "kubelet-port", 0, "Port of the node agent's kubelet API (logs, exec, attach, port-forward) on the node's address (127.0.0.1, or 10.244.0.1 with --network=pod); 0 picks a free port (the kubelet's 10250 first with --network=pod).")
	fs.StringVar(&f.opts.Images, "images", nodeagent.ImagesOCI, "Where containers get their files: \"oci\" runs each container's image (pulled from its registry into <data-dir>/images, or loaded with \"jobkeeper image load\"); \"host\" runs the container's command on this host's own files, copy-on-write (for the host's programs: GPU drivers, local toolchains). Never falls back from one to the other.")
	fs.DurationVar(&f.opts.ShutdownGracePeriod, "shutdown-grace-period", nodeagent.DefaultShutdownGracePeriod, "On a clean stop (Ctrl-C, SIGTERM) the node shuts down gracefully, as a kubelet's graceful node shutdown: every running pod gets the DisruptionTarget condition and is stopped with its grace period capped to this, then ends Failed.")
	fs.BoolVar(&f.opts.KeepRunningOnStop, "keep-running-on-stop", false, "On a clean stop, leave running containers alone, as a kubelet restart does: the next \"jobkeeper up\" on the same --data-dir takes them over (and a container that no agent takes over within 5 minutes is stopped). Without it a stop is a graceful node shutdown (--shutdown-grace-period).")
	fs.StringVar(&f.opts.Isolation, "pod-isolation", process.IsolationAuto, "Filesystem isolation of the process runtime: \"auto\" gives each container a private copy-on-write view of this host where the machine allows it (root, or user and mount namespaces), with volumes mounted in it; \"off\" never does, and pods with volumes are then refused.")
	fs.StringToStringVar(&f.reserved, "system-reserved", nil, "Resources kept for this machine's own processes, taken from the node's capacity to make its allocatable (the kubelet's --system-reserved): cpu, memory and ephemeral-storage, as cpu=500m,memory=1Gi. Pods are scheduled, and resized, against what is left.")
	fs.StringToInt64Var(&f.extended, "extended-resource", nil, "An extended resource the local Node advertises, as NAME=COUNT (example.com/gpu=1; repeat or separate with commas): pods requesting it are scheduled while the count lasts, others stay Pending with the scheduler's \"Insufficient\" message. Nothing is attached to the container for it.")
	fs.Int64Var(&f.opts.PodMaxPids, "pod-max-pids", -1, "The most processes a pod may have (its cgroup's pids.max, the kubelet's --pod-max-pids); -1: no limit. Needs cgroups (--cgroups=auto, as root).")
	fs.StringVar(&f.opts.Cgroups, "cgroups", nodeagent.CgroupsAuto, "Resource limits of the process runtime: \"auto\" puts each pod and container in cgroups laid out as the kubelet's, with their cpu and memory limits (a container over its memory limit is OOMKilled), where the node agent can write cgroups (as root, or as a user in a cgroup delegated to it); \"off\" never does, and limits are only warned about (NotEnforced).")
	fs.StringVar(&f.network, "network", "", "How pods are networked: \"pod\" gives each pod that is not hostNetwork a network namespace of its own, with an address from --pod-cidr, reaching the others, this host's networks, Services at their cluster IPs and names (the cluster DNS), and the apiserver at the kubernetes Service; as a user, up then runs in a user and network namespace of its own, linked to this host by pasta (the passt package). \"host\": pods share this host's network, as processes of it. The default is \"pod\" as root (with the process runtime and pod isolation) and \"host\" otherwise.")
	fs.StringVar(&f.podCIDR, "pod-cidr", podnet.DefaultPodCIDR.String(), "The pods' address range with --network=pod (IPv4, at least /30); its first address is this node's on the pod network. Refused when it overlaps a route of this host's.")
	fs.BoolVar(&f.opts.SeccompDefault, "seccomp-default", false, "Give containers that name no seccomp profile the runtime's default (RuntimeDefault), as the kubelet's --seccomp-default; without it they run Unconfined, the kubelet's default. Localhost profiles are read from <data-dir>/seccomp.")
}

// shutdownGrace is how long a clean stop of the node agent may take to
// stop its pods.
func (f *nodeAgentFlags) shutdownGrace() time.Duration {
	if !f.enabled || f.opts.KeepRunningOnStop {
		return 0
	}
	return f.opts.ShutdownGracePeriod
}

// validate checks the node agent flags before anything starts.
func (f *nodeAgentFlags) validate() error {
	if gates := nodeagent.GatesNotHonoured(utilfeature.DefaultFeatureGate.Enabled); f.enabled && len(gates) > 0 {
		return fmt.Errorf("--feature-gates turns on what the node agent does not do for pods, so pods using it would run without it: %s; "+
			"turn them off, or run up with --node-agent=false and a node of your own (docs/node-agent.md lists the gates)", strings.Join(gates, ", "))
	}
	if f.opts.ShutdownGracePeriod <= 0 {
		return fmt.Errorf("--shutdown-grace-period must be positive")
	}
	if f.opts.MaxPods < 1 {
		return fmt.Errorf("--max-pods must be at least 1")
	}
	if f.opts.SyncFrequency <= 0 {
		return fmt.Errorf("--sync-frequency %s must be positive", f.opts.SyncFrequency)
	}
	if f.opts.Runtime != process.Name && f.opts.Runtime != simulated.Name {
		return fmt.Errorf("--runtime %q is not one of %q, %q", f.opts.Runtime, process.Name, simulated.Name)
	}
	if f.opts.Isolation != process.IsolationAuto && f.opts.Isolation != process.IsolationOff {
		return fmt.Errorf("--pod-isolation %q is not one of %q, %q", f.opts.Isolation, process.IsolationAuto, process.IsolationOff)
	}
	for name, v := range f.reserved {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("--system-reserved %s=%s: %v", name, v, err)
		}
		if f.opts.SystemReserved == nil {
			f.opts.SystemReserved = corev1.ResourceList{}
		}
		f.opts.SystemReserved[corev1.ResourceName(name)] = q
	}
	if err := nodeagent.ValidateSystemReserved(f.opts.SystemReserved); err != nil {
		return fmt.Errorf("--%w", err)
	}
	for name, n := range f.extended {
		if !v1helper.IsExtendedResourceName(corev1.ResourceName(name)) {
			return fmt.Errorf("--extended-resource %s: not an extended resource name (a domain-qualified name outside kubernetes.io, such as example.com/gpu)", name)
		}
		if n < 0 {
			return fmt.Errorf("--extended-resource %s=%d: the count is negative", name, n)
		}
		if f.opts.ExtendedResources == nil {
			f.opts.ExtendedResources = map[corev1.ResourceName]int64{}
		}
		f.opts.ExtendedResources[corev1.ResourceName(name)] = n
	}
	if f.opts.Cgroups != nodeagent.CgroupsAuto && f.opts.Cgroups != nodeagent.CgroupsOff {
		return fmt.Errorf("--cgroups %q is not one of %q, %q", f.opts.Cgroups, nodeagent.CgroupsAuto, nodeagent.CgroupsOff)
	}
	if f.opts.Images != nodeagent.ImagesOCI && f.opts.Images != nodeagent.ImagesHost {
		return fmt.Errorf("--images %q is not one of %q, %q", f.opts.Images, nodeagent.ImagesOCI, nodeagent.ImagesHost)
	}
	if f.opts.Images == nodeagent.ImagesOCI && f.opts.Isolation == process.IsolationOff {
		return fmt.Errorf("--images=%s needs a private filesystem view for each container: use --pod-isolation=%s, or --images=%s", nodeagent.ImagesOCI, process.IsolationAuto, nodeagent.ImagesHost)
	}
	if err := f.validateNetwork(); err != nil {
		return err
	}
	if f.opts.KubeletPort < 0 || f.opts.KubeletPort > 65535 {
		return fmt.Errorf("--kubelet-port %d is out of range 0-65535", f.opts.KubeletPort)
	}
	return nil
}

// component returns the upComponent that starts the node agent. Once the
// agent's runtime is set up, it says on out how pods see this host.
func (f *nodeAgentFlags) component(out io.Writer) upComponent {
	return func(ctx context.Context, cp *controlplane.ControlPlane) (func(), error) {
		if !f.enabled {
			return func() {}, nil
		}
		opts := f.opts
		pki := cp.PKI()
		opts.DataDir = filepath.Join(cp.DataDir(), "node")
		opts.ImageDir = filepath.Join(cp.DataDir(), "images")
		// Host-mode containers do not see the data directory (the
		// control plane's keys, the admin kubeconfig, etcd's files) nor
		// etcd's socket.
		opts.HiddenPaths = append(opts.HiddenPaths, cp.PrivateDirs()...)
		opts.ServingCertFile = pki.NodeServingCert()
		opts.ServingKeyFile = pki.NodeServingKey()
		opts.ClientCAFile = pki.CACert()
		opts.AllowedClientCommonNames = []string{controlplane.KubeletClientCommonName}
		var network *podNetwork
		// The network outlives ctx: pods being stopped after it ended
		// (grace periods, preStop hooks) still reach the apiserver, the
		// DNS and each other; endNetwork ends it once the agent stopped.
		netCtx, stopNetwork := context.WithCancel(context.WithoutCancel(ctx))
		if f.network == networkPod {
			// Pods reach the apiserver at the kubernetes Service's
			// address, which the node relays, and the cluster DNS at
			// the kube-dns Service's.
			var err error
			if network, err = startPodNetwork(netCtx, cp, opts.DataDir, f.cidr); err != nil {
				stopNetwork()
				return nil, err
			}
			opts.PodNetwork, opts.ClusterDNS = network.pods, []string{clusterDNSIP.String()}
			// The node is at its address on the pod network, where pods
			// and the apiserver reach it (node ports, the kubelet API).
			opts.NodeIP = nodeAddress(f.cidr).String()
			if opts.KubeletPort == 0 {
				opts.KubeletPort = kubeletPortAt(opts.NodeIP)
			}
			opts.ResolvConf = podsResolvConf()
		} else {
			// Pods share this host's network: they reach the apiserver
			// where it listens, not at the kubernetes Service's
			// ClusterIP, which nothing routes here.
			apiserver, err := url.Parse(cp.URL())
			if err != nil {
				stopNetwork()
				return nil, fmt.Errorf("the apiserver's URL %q: %w", cp.URL(), err)
			}
			opts.APIServer = apiserver.Host
		}
		// The network goes once the agent stopped its pods (or stays for
		// the next up when their containers are left running).
		endNetwork := func() {
			stopNetwork()
			if network != nil {
				network.stop(f.opts.KeepRunningOnStop)
			}
		}
		// The kubelet's default --kube-api-content-type.
		cfg := controlplane.ProtobufConfig(cp.AdminConfig())
		cfg.UserAgent = "jobkeeper-node-agent"
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			endNetwork()
			return nil, err
		}
		agent, err := nodeagent.New(client, opts)
		if err != nil {
			endNetwork()
			return nil, fmt.Errorf("node agent: %w", err)
		}
		if f.metrics != nil {
			if err := f.metrics.start(ctx, cp, agent); err != nil {
				endNetwork()
				return nil, fmt.Errorf("resource metrics API: %w", err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer endNetwork()
			if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Node agent stopped")
			}
		}()
		isoCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if ok, why, err := agent.Isolation(isoCtx); err == nil {
			if !ok && f.opts.Runtime == process.Name && f.opts.Images == nodeagent.ImagesOCI {
				// The agent's Run has refused to start.
				return nil, fmt.Errorf("containers cannot get a private filesystem view here (%s), so their images cannot be run: start with --images=host to run commands on this host's own files instead", why)
			}
			fmt.Fprintln(out, isolationBanner(f.opts.Runtime, f.opts.Images, opts.ImageDir, ok, why))
			if f.opts.Runtime == process.Name {
				fmt.Fprintln(out, networkBanner(f.network, f.cidr, f.networkWhy))
			}
			if ok {
				if pid, why, err := agent.PIDNamespaces(isoCtx); err == nil && !pid {
					fmt.Fprintln(out, "WARNING: containers get no PID namespace here ("+why+"):\n"+
						"they see (and may signal) every process of this host.")
				}
			}
			if f.opts.Runtime == process.Name {
				if limits, why, err := agent.Limits(isoCtx); err == nil {
					fmt.Fprintln(out, limitsBanner(limits, why))
				}
			}
		}
		return func() { <-done }, nil
	}
}

// isolationBanner says how pods see this host: which images mode is in
// use, and what a container cannot have here.
func isolationBanner(runtime, imagesMode, imageDir string, isolated bool, why string) string {
	switch {
	case runtime == simulated.Name:
		return "Pods are simulated: nothing runs on this host."
	case imagesMode == nodeagent.ImagesOCI && isolated:
		return "Pods run their images (--images=oci): each container's root is its image, pulled from its registry\n" +
			"into " + imageDir + " or loaded with `jobkeeper image load FILE`; its writes stay in the container.\n" +
			"--images=host runs commands on this host's own files instead."
	case isolated:
		return "Pods run as processes on this host, and the host is the image (--images=host): each container sees\n" +
			"this host's filesystems copy-on-write (its writes stay in the container), with its volumes mounted in that view.\n" +
			"Images are not pulled."
	}
	return "WARNING: containers cannot get a private filesystem view here (" + why + "):\n" +
		"pods run as processes directly on this host's filesystem (--images=host), and pods with volumes are refused."
}

// networkBanner says how pods are networked.
func networkBanner(mode string, cidr netip.Prefix, why string) string {
	if mode != networkPod {
		if why != "" {
			return "Pods share this host's network (--network=host, as pods cannot get networks of their own here:\n" + why + ")."
		}
		if os.Geteuid() != 0 {
			return "Pods share this host's network (--network=host): a pod's ports are this host's; --network=pod gives each\n" +
				"a network of its own (as a user, in namespaces of up's own linked to this host by pasta)."
		}
		return "Pods share this host's network (--network=host): a pod's ports are this host's; --network=pod gives each its own."
	}
	rootless := ""
	if inRootlessNode {
		rootless = "The node is a user and network namespace of up's own, linked to this host by pasta: pods reach this host's\n" +
			"networks through it, and this host reaches the apiserver at 127.0.0.1 as usual, but not pods' or Services' addresses.\n"
	}
	return rootless + "Each pod gets a network of its own (--network=pod): an address in " + cidr.String() + ", the apiserver at the kubernetes\n" +
		"Service (" + kubernetesIP.String() + ":443), Services at their cluster IPs and node ports (the node is " + nodeAddress(cidr).String() + "), and the\n" +
		"cluster DNS at " + clusterDNSIP.String() + " (Services and pods by name). Deployments, StatefulSets, DaemonSets and ReplicationControllers\n" +
		"run from the first one created."
}

// limitsBanner says whether containers' resource limits are enforced.
func limitsBanner(enforced bool, why string) string {
	if enforced {
		return "Pods and containers get cgroups with their cpu and memory limits (--cgroups=auto): a container over\n" +
			"its memory limit is OOMKilled, and its CPU is held to its limit."
	}
	return "WARNING: cpu and memory limits are not enforced here (" + why + "):\n" +
		"pods with them run with a NotEnforced Warning event (ephemeral-storage limits still evict)."
}

// serveMetrics serves jobkeeper's /metrics (and, with profiling, Go's
// /debug/pprof) on addr until ctx is done, over HTTPS behind the apiserver's
// authentication and authorization, as kube-controller-manager serves its
// own: the admin's client certificate is let in, a ServiceAccount needs an
// RBAC rule for the non-resource URL. addr "0" or "" serves nothing. It
// returns the address served ("" when none).
func serveMetrics(ctx context.Context, cp *controlplane.ControlPlane, addr string, profiling bool) (string, error) {
	if addr == "0" || addr == "" {
		return "", nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	served, _, err := cp.ServeAuthenticated(ctx, addr, mux)
	if err != nil {
		return "", fmt.Errorf("serving metrics on %s: %w", addr, err)
	}
	klog.FromContext(ctx).Info("Serving metrics", "address", served, "protection", "HTTPS, apiserver authentication and authorization")
	return served, nil
}

// defaultKubeletPort is the kubelet's port, which tools that do not read
// the Node's daemonEndpoints (upstream's e2e framework among them) assume.
const defaultKubeletPort = 10250

// kubeletPortAt is defaultKubeletPort when it is free at ip, else 0 (any
// free port): the node's own address on the pod network has it free
// unless a kubelet of this host listens on all its addresses.
func kubeletPortAt(ip string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(defaultKubeletPort)))
	if err != nil {
		return 0
	}
	_ = ln.Close()
	return defaultKubeletPort
}

// validateNetwork checks --network and --pod-cidr.
func (f *nodeAgentFlags) validateNetwork() error {
	if f.network == "" {
		f.network = networkHost
		if os.Geteuid() == 0 && f.opts.Runtime == process.Name && f.opts.Isolation != process.IsolationOff {
			f.network = networkPod
			if why := podNetworkUnavailable(f.dataDir); why != "" {
				f.network, f.networkWhy = networkHost, why
			}
		}
	}
	switch f.network {
	case networkPod:
		if os.Geteuid() != 0 && f.opts.KeepRunningOnStop {
			return errors.New("--keep-running-on-stop with --network=pod needs root: as a user the pods' network is in up's own namespaces, which end with it")
		}
		if f.opts.Runtime != process.Name {
			return fmt.Errorf("--network=%s needs --runtime=%s: the %s runtime runs no processes to network", networkPod, process.Name, f.opts.Runtime)
		}
		if f.opts.Isolation == process.IsolationOff {
			return fmt.Errorf("--network=%s gives pods their own /etc/resolv.conf and /etc/hosts, which needs --pod-isolation=%s", networkPod, process.IsolationAuto)
		}
		p, err := netip.ParsePrefix(f.podCIDR)
		if err != nil {
			return fmt.Errorf("--pod-cidr %q: %v", f.podCIDR, err)
		}
		if !p.Addr().Is4() || p.Bits() > 30 {
			return fmt.Errorf("--pod-cidr %s: an IPv4 range of at least 4 addresses (a /30 or wider) is needed", f.podCIDR)
		}
		f.cidr = p.Masked()
	case networkHost:
	default:
		return fmt.Errorf("--network %q is not one of %q, %q", f.network, networkPod, networkHost)
	}
	return nil
}
