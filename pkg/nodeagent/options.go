package nodeagent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/images"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/volume"
)

// Defaults of Options.
const (
	// DefaultMaxPods is the default pod capacity of the node.
	DefaultMaxPods = 110
	// DefaultRuntime is the default runtime.
	DefaultRuntime = process.Name
	// DefaultAPIServerClientCN is the common name of the apiserver's kubelet client certificate.
	DefaultAPIServerClientCN = "kube-apiserver-kubelet-client"
	// ImagesOCI runs every container from its OCI image (Options.Images).
	ImagesOCI = "oci"
	// ImagesHost runs every container's command on this host's files.
	ImagesHost = "host"
	// DefaultShutdownGracePeriod is the default ShutdownGracePeriod.
	DefaultShutdownGracePeriod = 5 * time.Second
	// DefaultSyncFrequency is the default SyncFrequency (the volume
	// manager's, volume.DefaultSyncFrequency).
	DefaultSyncFrequency = volume.DefaultSyncFrequency
)

// Options configure the node agent. Flags are wired in cmd/.
type Options struct {
	// NodeName is the Node's name; default the host name.
	NodeName string
	// MaxPods is the node's pod capacity (--max-pods); default DefaultMaxPods.
	MaxPods int
	// Runtime is "process" (default) or "simulated".
	Runtime string
	// DataDir holds pod working directories, logs and runtime state (required).
	DataDir string
	// NodeIP is the node's address: the Node's InternalIP, its pods'
	// status.hostIP (and status.podIP of those sharing its network), and
	// where the kubelet endpoint listens, for the apiserver to reach it
	// there. Default podconfig.NodeIP (127.0.0.1); `up --network=pod`
	// gives the node's address on the pod network, which pods reach.
	NodeIP string
	// KubeletPort is the port of the log endpoint on NodeIP; 0 picks a
	// free port. The real one is advertised in the Node status.
	KubeletPort int
	// ServingCertFile and ServingKeyFile are the endpoint's TLS certificate
	// (signed by the control plane CA, SANs 127.0.0.1, localhost and
	// NodeIP).
	// Empty: the log endpoint is not served.
	ServingCertFile, ServingKeyFile string
	// ClientCAFile verifies the apiserver's client certificate (required
	// with a serving certificate).
	ClientCAFile string
	// AllowedClientCommonNames are the client certificate CNs accepted;
	// default [DefaultAPIServerClientCN].
	AllowedClientCommonNames []string
	// LogMaxSize is the size at which a container log is rotated; 0 means 10 MiB.
	LogMaxSize int64
	// StatusWorkers is the number of concurrent status writers; default 16.
	StatusWorkers int
	// Clock is the clock; default the real one.
	Clock clock.WithTicker
	// SyncFrequency is how often the configMap, secret, downwardAPI and
	// projected volumes of running pods are refreshed (the kubelet's
	// --sync-frequency); default DefaultSyncFrequency.
	SyncFrequency time.Duration
	// Images is where the process runtime's containers get their files
	// (--images): ImagesOCI (default) runs each container's image, pulled
	// into the store at ImageDir (or loaded with `jobkeeper image load`);
	// ImagesHost runs the container's command on this host's own files ("the
	// host is the image"). The agent never falls back from one to the other.
	Images string
	// ImageDir is the image store's directory; default <DataDir>/images.
	ImageDir string
	// statNetNS, set by tests, replaces statNetNS (recover.go).
	statNetNS func(path string) netNSID
	// imageStore, set by tests, runs images from this store whatever the
	// runtime (a fake one included).
	imageStore *images.Store
	// APIServer is where pods on this node reach the apiserver, as
	// "host:port" with an IP address as host (`up`: 127.0.0.1 and its
	// secure port, since pods share the host's network). Containers get it
	// as the kubernetes Service's variables (KUBERNETES_SERVICE_HOST,
	// KUBERNETES_SERVICE_PORT, KUBERNETES_PORT...), which
	// rest.InClusterConfig reads, in place of the Service's ClusterIP and
	// port. Empty: the Service's own, as a kubelet gives them.
	APIServer string
	// ShutdownGracePeriod is how long a clean stop of the agent (Run's
	// context ending) gives running pods, as the kubelet's
	// shutdownGracePeriod: each pod is stopped with its own grace period
	// capped to this, as in a graceful node shutdown. 0 means
	// DefaultShutdownGracePeriod.
	ShutdownGracePeriod time.Duration
	// KeepRunningOnStop makes a clean stop leave running containers alone,
	// as a kubelet restart does (and as a crash of the agent does): the
	// next run of the agent on the same data directory takes them over, and
	// a container that no agent takes over within the runtime's orphan
	// timeout (5 minutes) is stopped by its sandbox. Pods of a runtime that
	// cannot be taken over (simulated) are then found lost by the next run.
	KeepRunningOnStop bool
	// Isolation is the process runtime's filesystem isolation (--pod-isolation):
	// process.IsolationAuto (default) gives each container a private
	// copy-on-write view of the host where the machine allows it;
	// process.IsolationOff never does, and pods with volumes are refused.
	Isolation string
	// ExtendedResources are extended resources (example.com/gpu) the node
	// advertises in its capacity, with their counts (--extended-resource),
	// for pods to request; nothing is attached to a container for them.
	ExtendedResources map[corev1.ResourceName]int64
	// SystemReserved is what the node keeps for the system, taken from
	// its capacity to make its allocatable (the kubelet's
	// --system-reserved): cpu, memory, ephemeral-storage.
	SystemReserved corev1.ResourceList
	// PodMaxPids limits the processes of each pod (the pod cgroup's
	// pids.max, the kubelet's --pod-max-pids); 0 or less: no limit. Only
	// with cgroups.
	PodMaxPids int64
	// Cgroups is CgroupsAuto (default: pods and containers get cgroups
	// with their limits where the agent can write cgroups) or CgroupsOff
	// (--cgroups).
	Cgroups string
	// HiddenPaths are more host directories or files that host-mode
	// containers (--images=host) do not see, beside DataDir and ImageDir
	// (`up`: its whole data directory, with the control plane's keys and
	// the admin kubeconfig).
	HiddenPaths []string
	// SeccompDefault gives containers that name no seccomp profile the
	// runtime's default (RuntimeDefault), as the kubelet's
	// --seccomp-default; false: they run Unconfined, the kubelet's default.
	SeccompDefault bool
	// PodNetwork, when set, gives pods that are not hostNetwork network
	// namespaces of their own (podnetwork.go); nil: pods share the
	// agent's. Only with a runtime that can join them (as root).
	PodNetwork PodNetwork
	// ResolvConf is the resolver configuration pods' own is composed
	// from (the kubelet's --resolv-conf); default podconfig.HostResolvConf.
	ResolvConf string
	// ClusterDNS are the nameservers of pods whose dnsPolicy asks for the
	// cluster's DNS (the kubelet's --cluster-dns); empty: they get the
	// host's, as a kubelet without cluster DNS gives.
	ClusterDNS []string
}

// complete applies defaults and validates.
func (o *Options) complete() error {
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name not set and host name unknown: %w", err)
		}
		o.NodeName = h
	}
	if o.MaxPods <= 0 {
		o.MaxPods = DefaultMaxPods
	}
	if o.NodeIP == "" {
		o.NodeIP = podconfig.NodeIP
	}
	if ip, err := netip.ParseAddr(o.NodeIP); err != nil || !ip.Is4() {
		return fmt.Errorf("node IP %q: want an IPv4 address", o.NodeIP)
	}
	if o.SyncFrequency < 0 {
		return fmt.Errorf("sync frequency %s: must not be negative", o.SyncFrequency)
	}
	if o.SyncFrequency == 0 {
		o.SyncFrequency = DefaultSyncFrequency
	}
	if o.Runtime == "" {
		o.Runtime = DefaultRuntime
	}
	if o.Runtime != process.Name && o.Runtime != simulated.Name {
		return fmt.Errorf("unknown runtime %q (want %q or %q)", o.Runtime, process.Name, simulated.Name)
	}
	if o.DataDir == "" {
		return errors.New("DataDir is required")
	}
	if len(o.AllowedClientCommonNames) == 0 {
		o.AllowedClientCommonNames = []string{DefaultAPIServerClientCN}
	}
	if (o.ServingCertFile == "") != (o.ServingKeyFile == "") {
		return errors.New("ServingCertFile and ServingKeyFile go together")
	}
	if o.ServingCertFile != "" && o.ClientCAFile == "" {
		return errors.New("ClientCAFile is required to serve logs")
	}
	if o.Isolation == "" {
		o.Isolation = process.IsolationAuto
	}
	for name, n := range o.ExtendedResources {
		if !v1helper.IsExtendedResourceName(name) {
			return fmt.Errorf("extended resource %q: not an extended resource name (a domain-qualified name outside kubernetes.io, such as example.com/gpu)", name)
		}
		if n < 0 {
			return fmt.Errorf("extended resource %q: count %d is negative", name, n)
		}
	}
	if err := ValidateSystemReserved(o.SystemReserved); err != nil {
		return err
	}
	if o.Cgroups == "" {
		o.Cgroups = CgroupsAuto
	}
	if o.Cgroups != CgroupsAuto && o.Cgroups != CgroupsOff {
		return fmt.Errorf("unknown cgroups mode %q (want %q or %q)", o.Cgroups, CgroupsAuto, CgroupsOff)
	}
	if o.Isolation != process.IsolationAuto && o.Isolation != process.IsolationOff {
		return fmt.Errorf("unknown pod isolation %q (want %q or %q)", o.Isolation, process.IsolationAuto, process.IsolationOff)
	}
	if o.Images == "" {
		o.Images = ImagesOCI
	}
	if o.Images != ImagesOCI && o.Images != ImagesHost {
		return fmt.Errorf("unknown images mode %q (want %q or %q)", o.Images, ImagesOCI, ImagesHost)
	}
	if o.ImageDir == "" {
		o.ImageDir = filepath.Join(o.DataDir, "images")
	}
	if o.ShutdownGracePeriod <= 0 {
		o.ShutdownGracePeriod = DefaultShutdownGracePeriod
	}
	if o.ResolvConf == "" {
		o.ResolvConf = podconfig.HostResolvConf
	}
	if o.StatusWorkers <= 0 {
		o.StatusWorkers = 16
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return nil
}

// ValidateSystemReserved checks a --system-reserved list: only cpu,
// memory and ephemeral-storage, none negative.
func ValidateSystemReserved(reserved corev1.ResourceList) error {
	for name, q := range reserved {
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		default:
			return fmt.Errorf("system-reserved %q: only cpu, memory and ephemeral-storage can be reserved", name)
		}
		if q.Sign() < 0 {
			return fmt.Errorf("system-reserved %s=%s: negative", name, q.String())
		}
	}
	return nil
}
