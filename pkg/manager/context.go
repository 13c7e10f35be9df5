package manager

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// ControllerContext is what every controller gets at start-up.
type ControllerContext struct {
	// Options are the parsed flags.
	Options *Options
	// RestConfig is the client configuration (QPS and burst already applied).
	RestConfig *rest.Config
	// Client is the typed clientset built from RestConfig.
	Client kubernetes.Interface
	// Dynamic is the dynamic client built from RestConfig.
	Dynamic dynamic.Interface
	// Metadata is the metadata-only client built from RestConfig.
	Metadata metadata.Interface
	// InformerFactory is shared by all controllers; the manager starts it
	// after every InitFunc has registered its informers.
	InformerFactory informers.SharedInformerFactory
	// JobPodFactory lists and watches only the pods that carry the Job
	// label (batch.kubernetes.io/controller-uid, on the pods of every Job
	// without manualSelector), so that the pods of other workloads are never
	// cached: its Pods() is the Job pods' informer. The Job controller watches
	// the rest itself (job.Options.JobPodsOnly), and so does the TTL
	// controller (ttlafterfinished.Options.JobPods). The manager starts it
	// with InformerFactory.
	JobPodFactory informers.SharedInformerFactory
	// Registerer is where controllers register their Prometheus collectors.
	Registerer prometheus.Registerer
	// Clock is the clock controllers must use (a fake one in tests).
	Clock clock.WithTicker
}

// RunFunc runs a started controller until ctx is done.
type RunFunc func(ctx context.Context)

// InitFunc builds a controller and registers its informers; the returned
// RunFunc is called after the informer factory has started.
type InitFunc func(ctx context.Context, cc ControllerContext) (RunFunc, error)

// initFuncs maps controller names to their constructors. Controller packages
// add themselves in this package's per-controller files.
var initFuncs = map[string]InitFunc{}
