// Package metricsapi serves the resource metrics API (metrics.k8s.io/v1beta1,
// what `kubectl top` and the HorizontalPodAutoscaler read) in `jobkeeper
// up`. It is metrics-server's own API and storage (sigs.k8s.io/metrics-server,
// embedded as libraries) fed in process with the node agent's samples
// instead of scraping the kubelet's /metrics/resource over the network,
// served by a generic apiserver of its own on loopback, with delegated
// authentication and authorization, that the kube-apiserver's aggregator
// proxies to (APIService v1beta1.metrics.k8s.io, as a cluster registers
// metrics-server).
package metricsapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/common"
	openapiutil "k8s.io/kube-openapi/pkg/util"
	"sigs.k8s.io/metrics-server/pkg/api"
	generatedopenapi "sigs.k8s.io/metrics-server/pkg/api/generated/openapi"
	"sigs.k8s.io/metrics-server/pkg/storage"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/stats"
)

// Config is what the server needs.
type Config struct {
	// Listener is where it serves (loopback).
	Listener net.Listener
	// CertFile and KeyFile are its serving certificate, valid for the
	// Service the APIService names (ServiceHost).
	CertFile, KeyFile string
	// Kubeconfig reaches the kube-apiserver: for the delegated
	// authentication (the front proxy's CA and headers, token reviews)
	// and authorization (subject access reviews), and the pods and nodes
	// the API lists.
	Kubeconfig string
	// NodeName is the node the samples are of.
	NodeName string
	// Resolution is the interval between samples.
	Resolution time.Duration
}

// Server is the resource metrics API server.
type Server struct {
	cfg   Config
	store interface {
		api.MetricsGetter
		Store(*storage.MetricsBatch)
	}
}

// New returns a server whose metrics Store feeds.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, store: storage.NewStorage(cfg.Resolution)}
}

// Store takes the agent's latest sample.
func (s *Server) Store(snap stats.Snapshot) {
	s.store.Store(batch(s.cfg.NodeName, snap))
}

// batch is a sample as metrics-server's storage takes a scrape.
func batch(node string, snap stats.Snapshot) *storage.MetricsBatch {
	b := &storage.MetricsBatch{
		Nodes: map[string]storage.MetricsPoint{},
		Pods:  map[apitypes.NamespacedName]storage.PodMetricsPoint{},
	}
	if snap.Node.CPU > 0 {
		b.Nodes[node] = storage.MetricsPoint{StartTime: snap.Node.StartTime, Timestamp: snap.Time,
			CumulativeCPUUsed: uint64(snap.Node.CPU), MemoryUsage: snap.Node.WorkingSet}
	}
	for _, p := range snap.Pods {
		pm := storage.PodMetricsPoint{Containers: map[string]storage.MetricsPoint{}}
		for _, c := range p.Containers {
			pm.Containers[c.Name] = storage.MetricsPoint{StartTime: c.Stats.StartedAt, Timestamp: snap.Time,
				CumulativeCPUUsed: uint64(c.Stats.CPU), MemoryUsage: c.Stats.WorkingSet}
		}
		b.Pods[apitypes.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = pm
	}
	return b
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", s.cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("metrics API: reading the kubeconfig: %w", err)
	}
	serverConfig := genericapiserver.NewConfig(api.Codecs)
	secure := genericoptions.NewSecureServingOptions()
	secure.Listener = s.cfg.Listener
	secure.BindAddress = net.ParseIP("127.0.0.1")
	secure.BindPort = s.cfg.Listener.Addr().(*net.TCPAddr).Port
	secure.ServerCert.CertKey.CertFile, secure.ServerCert.CertKey.KeyFile = s.cfg.CertFile, s.cfg.KeyFile
	if err := secure.WithLoopback().ApplyTo(&serverConfig.SecureServing, &serverConfig.LoopbackClientConfig); err != nil {
		return fmt.Errorf("metrics API: serving: %w", err)
	}
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = s.cfg.Kubeconfig
	if err := authn.ApplyTo(&serverConfig.Authentication, serverConfig.SecureServing, nil); err != nil {
		return fmt.Errorf("metrics API: authentication: %w", err)
	}
	// Every request is authenticated (/version and the health checks
	// too), as by up's kube-apiserver, which allows no anonymous request:
	// the aggregator presents its front proxy certificate. The delegating
	// options always add an anonymous authenticator last; its answers are
	// refused.
	serverConfig.Authentication.Authenticator = noAnonymous{serverConfig.Authentication.Authenticator}
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = s.cfg.Kubeconfig
	if err := authz.ApplyTo(&serverConfig.Authorization); err != nil {
		return fmt.Errorf("metrics API: authorization: %w", err)
	}
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, openapinamer.NewDefinitionNamer(api.Scheme))
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, openapinamer.NewDefinitionNamer(api.Scheme))
	serverConfig.OpenAPIConfig.Info.Title, serverConfig.OpenAPIV3Config.Info.Title = "jobkeeper metrics", "jobkeeper metrics"
	serverConfig.OpenAPIConfig.Info.Version, serverConfig.OpenAPIV3Config.Info.Version = "v1beta1", "v1beta1"
	serverConfig.EffectiveVersion = utilcompatibility.DefaultBuildEffectiveVersion()
	// The kube-apiserver in the same process serves the Prometheus
	// metrics; this server registers none of its own.
	serverConfig.EnableMetrics = false

	server, err := serverConfig.Complete(nil).New("jobkeeper-metrics", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return fmt.Errorf("metrics API: %w", err)
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	nodeInformers := informers.NewSharedInformerFactory(client, 0)
	nodes := nodeInformers.Core().V1().Nodes()
	// As metrics-server: only running pods have metrics.
	podInformers := metadatainformer.NewFilteredSharedInformerFactory(meta, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase=Running"
	})
	pods := podInformers.ForResource(corev1.SchemeGroupVersion.WithResource("pods"))
	if err := api.Install(s.store, pods.Lister(), nodes.Lister(), server, nil); err != nil {
		return fmt.Errorf("metrics API: %w", err)
	}
	nodeInformers.Start(ctx.Done())
	podInformers.Start(ctx.Done())
	klog.FromContext(ctx).V(2).Info("Serving the resource metrics API", "address", s.cfg.Listener.Addr().String())
	return server.PrepareRun().RunWithContext(ctx)
}

// openAPIDefinitions are metrics-server's generated OpenAPI definitions,
// also under the names this apiserver library looks models up by: the
// REST-friendly ones the API types declare ("io.k8s.metrics.pkg.apis..."),
// where metrics-server's generator keyed them by Go package path.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := generatedopenapi.GetOpenAPIDefinitions(ref)
	out := make(map[string]common.OpenAPIDefinition, 2*len(defs))
	for name, def := range defs {
		out[name] = def
		out[openapiutil.ToRESTFriendlyName(name)] = def
	}
	return out
}

// noAnonymous refuses the requests the authenticator it wraps lets in as
// the anonymous user.
type noAnonymous struct {
	next authenticator.Request
}

// AuthenticateRequest implements authenticator.Request.
func (n noAnonymous) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := n.next.AuthenticateRequest(req)
	if ok && resp != nil && resp.User != nil && resp.User.GetName() == user.Anonymous {
		return nil, false, nil
	}
	return resp, ok, err
}
