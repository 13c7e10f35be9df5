package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/errors"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	aggregatorapiserver "k8s.io/kube-aggregator/pkg/apiserver"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/controlplane/reconcilers"
)

// serviceCIDR is the service cluster IP range; its first address is the
// kubernetes.default Service, included in the serving certificate.
const ServiceCIDR = "10.0.0.0/24"

// serviceIP is the first address of serviceCIDR.
var serviceIP = net.ParseIP("10.0.0.1")

// watchDrainGrace is the apiserver's --shutdown-watch-termination-grace-period:
// how long its graceful stop waits for the watches it ends to drain.
const watchDrainGrace = time.Second

// watchCacheSizes is the apiserver's --watch-cache-sizes. The pods' watch
// cache is off, so every pod watch is served by its own etcd watch:
//
//   - On a real cluster each kubelet's pod watch (spec.nodeName=<node>) sees
//     its node's few pods, so the cacher gives such watchers a 10-event
//     buffer, and closes any watcher still full after its share of a 100 ms
//     per second budget. Here one node runs every pod at hundreds of events
//     a second on a machine the apiserver keeps busy: the node agent's and
//     its binder's watches were closed and re-opened about 200 times in a
//     10,000-pod Job, and the controllers' unfiltered ones 30 times (issue
//     27). An etcd watch is never closed for being slow: it waits.
//   - The cache holds every pod and 75 s of their past versions, decoded:
//     about 260 MB of live heap at 10,000 pods, for watchers that are all in
//     this process.
//
// What it costs: each pod event is decoded once per pod watcher (five in
// `up`) instead of once, and pod lists and reads go to etcd.
var watchCacheSizes = []string{"pods#0"}

// compactionInterval is the apiserver's --etcd-compaction-interval (default
// 5 minutes): etcd keeps one to two intervals of history, and its database
// file, read through a memory map, grows with it (on the order of 1 GB per
// 5 minutes of pod writes at the rate `up` reaches). A pod watch resuming
// from further back is told to relist.
const compactionInterval = time.Minute

// apiserverConfig is what startAPIServer needs.
type apiserverConfig struct {
	// listener is the already-bound secure port.
	listener net.Listener
	// etcdURL is the embedded etcd's client URL.
	etcdURL string
	// pki holds the certificates.
	pki PKI
	// authorizationModes are the --authorization-mode values.
	authorizationModes []string
	// serviceAccounts turns on the ServiceAccount admission plugin
	// (Config.ServiceAccountAdmission).
	serviceAccounts bool
	// localServices are the Services served in this process
	// (Config.LocalServices).
	localServices map[types.NamespacedName]*url.URL
}

// localServices resolves the Services of aggregated APIs served in this
// process to where they listen (nothing routes a Service's ClusterIP
// here), and every other Service as the aggregator would.
type localServices struct {
	next aggregatorapiserver.ServiceResolver
	urls map[types.NamespacedName]*url.URL
}

// ResolveEndpoint implements the aggregator's ServiceResolver.
func (l localServices) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	if u, ok := l.urls[types.NamespacedName{Namespace: namespace, Name: name}]; ok {
		return u, nil
	}
	return l.next.ResolveEndpoint(namespace, name, port)
}

// startAPIServer builds kube-apiserver from its own options structs, the way
// its command does, and runs it until ctx is done. It returns a channel that
// receives the server's exit error (nil after a clean stop) and is closed.
func startAPIServer(ctx context.Context, c apiserverConfig) (<-chan error, error) {
	s := options.NewServerRunOptions()

	s.SecureServing.Listener = c.listener
	s.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	s.SecureServing.BindPort = c.listener.Addr().(*net.TCPAddr).Port
	s.SecureServing.ExternalAddress = net.ParseIP("127.0.0.1")
	s.SecureServing.ServerCert.CertKey.CertFile = c.pki.ServingCert()
	s.SecureServing.ServerCert.CertKey.KeyFile = c.pki.ServingKey()
	s.Authentication.ClientCert.ClientCA = c.pki.CACert()
	s.Authentication.Anonymous.Allow = false
	// The aggregator's front proxy, as kubeadm sets it up: it presents the
	// front-proxy-client certificate to aggregated API servers (the
	// resource metrics API), which take the user from its X-Remote-*
	// headers only (they read this from kube-system's
	// extension-apiserver-authentication ConfigMap).
	s.Authentication.RequestHeader.ClientCAFile = c.pki.FrontProxyCACert()
	s.Authentication.RequestHeader.AllowedNames = []string{FrontProxyClientCommonName}
	s.Authentication.RequestHeader.UsernameHeaders = []string{"X-Remote-User"}
	s.Authentication.RequestHeader.UIDHeaders = []string{"X-Remote-Uid"}
	s.Authentication.RequestHeader.GroupHeaders = []string{"X-Remote-Group"}
	s.Authentication.RequestHeader.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	s.ProxyClientCertFile = c.pki.FrontProxyClientCert()
	s.ProxyClientKeyFile = c.pki.FrontProxyClientKey()
	s.Authorization.Modes = c.authorizationModes

	// Without the controllers that create every namespace's default
	// ServiceAccount and kube-root-ca.crt, the ServiceAccount admission
	// plugin would refuse every pod: a caller that does not run them
	// leaves it off.
	if !c.serviceAccounts {
		s.Admission.GenericAdmission.DisablePlugins = []string{"ServiceAccount"}
	}
	// Every other default plugin stays on, ValidatingAdmissionPolicy among
	// them (with admissionregistration.k8s.io/v1, both GA since 1.30): `up`
	// refuses the workloads it does not run with such a policy.

	s.ServiceAccountSigningKeyFile = c.pki.ServiceAccountKey()
	s.Authentication.ServiceAccounts.KeyFiles = []string{c.pki.ServiceAccountKey()}
	s.Authentication.ServiceAccounts.Issuers = []string{"https://kubernetes.default.svc.cluster.local"}
	// The default --service-account-extend-token-expiration (true) stays:
	// a pod-bound token requested for the admission plugin's 3607 seconds
	// with the apiserver's own audience is issued for a year (and its use
	// after the first hour logged as stale), so the node agent, which
	// does not refresh projected tokens, hands out one that stays valid for
	// as long as the pod exists.

	s.Etcd.StorageConfig.Transport.ServerList = []string{c.etcdURL}
	s.Etcd.WatchCacheSizes = watchCacheSizes
	s.Etcd.StorageConfig.CompactionInterval = compactionInterval
	s.ServiceClusterIPRanges = ServiceCIDR
	// A single apiserver on loopback: nothing to publish in the kubernetes
	// Endpoints, and the lease reconciler would only add writes.
	s.EndpointReconcilerType = string(reconcilers.NoneEndpointReconcilerType)
	s.AllowPrivileged = true
	s.EnableLogsHandler = false

	// Shut down as a lone apiserver with no load balancer in front: stop
	// at once (no --shutdown-delay-duration, the default), and end every
	// watch as soon as no new request is accepted. Without a watch
	// termination grace period the watch handlers only return when their
	// clients go, and the HTTP server's graceful shutdown waits for them
	// up to the request timeout (a minute) while clients connected from
	// outside (kubectl get -w, a controller) keep watching. With it, the
	// server signals each watch to end and waits at most this long for
	// them (ending at least 200 per second).
	s.GenericServerRunOptions.ShutdownDelayDuration = 0
	s.GenericServerRunOptions.ShutdownWatchTerminationGracePeriod = watchDrainGrace

	// The apiserver reaches the node agent (kubectl logs) with its own client
	// certificate and checks the node's serving certificate against our CA.
	s.KubeletConfig.TLSClientConfig.CertFile = c.pki.KubeletClientCert()
	s.KubeletConfig.TLSClientConfig.KeyFile = c.pki.KubeletClientKey()
	s.KubeletConfig.TLSClientConfig.CAFile = c.pki.CACert()
	s.KubeletConfig.PreferredAddressTypes = []string{"InternalIP", "Hostname"}

	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("setting component globals: %w", err)
	}
	// The API versions that gates turned on (up --feature-gates) need.
	for _, gv := range apiVersionsForGates(utilfeature.DefaultFeatureGate.Enabled) {
		if s.APIEnablement.RuntimeConfig == nil {
			s.APIEnablement.RuntimeConfig = map[string]string{}
		}
		s.APIEnablement.RuntimeConfig[gv] = "true"
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return nil, fmt.Errorf("completing kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return nil, fmt.Errorf("validating kube-apiserver options: %w", errors.NewAggregate(errs))
	}
	cfg, err := app.NewConfig(completed)
	if err != nil {
		return nil, fmt.Errorf("configuring kube-apiserver: %w", err)
	}
	overrideVersion(cfg)
	if len(c.localServices) > 0 {
		cfg.Aggregator.ExtraConfig.ServiceResolver = localServices{next: cfg.Aggregator.ExtraConfig.ServiceResolver, urls: c.localServices}
	}
	done, err := cfg.Complete()
	if err != nil {
		return nil, fmt.Errorf("completing kube-apiserver config: %w", err)
	}
	server, err := app.CreateServerChain(done)
	if err != nil {
		return nil, fmt.Errorf("creating kube-apiserver: %w", err)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return nil, fmt.Errorf("preparing kube-apiserver: %w", err)
	}
	errCh := make(chan error, 1)
	go func() {
		defer close(errCh)
		errCh <- prepared.Run(ctx)
	}()
	return errCh, nil
}

// overrideVersion makes /version report the Kubernetes release this binary
// was built with. Without link-time flags, k8s.io/component-base/version
// holds a placeholder that kubectl cannot parse.
func overrideVersion(cfg *app.Config) {
	gv := kubernetesVersion()
	for _, g := range []*genericapiserver.Config{
		&cfg.Aggregator.GenericConfig.Config,
		cfg.KubeAPIs.ControlPlane.Generic,
		&cfg.ApiExtensions.GenericConfig.Config,
	} {
		if g.EffectiveVersion != nil {
			g.EffectiveVersion = fixedGitVersion{EffectiveVersion: g.EffectiveVersion, gitVersion: gv}
		}
	}
}

// fixedGitVersion reports gitVersion in Info when the linked-in version is a placeholder.
type fixedGitVersion struct {
	basecompatibility.EffectiveVersion
	// gitVersion is the version to report, e.g. "v1.36.3".
	gitVersion string
}

// Info returns the wrapped version information with a usable GitVersion.
func (f fixedGitVersion) Info() *apimachineryversion.Info {
	info := f.EffectiveVersion.Info()
	if info != nil && (info.GitVersion == "" || strings.Contains(info.GitVersion, "$Format")) {
		info.GitVersion = f.gitVersion
		info.GitCommit = ""
		info.GitTreeState = ""
	}
	return info
}

// kubernetesVersion is the version of the k8s.io/kubernetes module linked in.
func kubernetesVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/kubernetes" {
				return d.Version
			}
		}
	}
	return "v1.36.0"
}
