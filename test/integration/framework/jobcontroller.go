package framework

import (
	"context"
	"sync"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/features"

	jobcontroller "jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/pkg/manager"
)

// JobControllerRun is one running Job controller with its own client and
// informers.
type JobControllerRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Stop cancels the controller and waits until its workers returned, like a
// process being killed and gone.
func (r *JobControllerRun) Stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

// StartJobController starts a Job controller with a fresh client (its
// configuration changed by configure, if not nil: its encoding, its
// transport) and fresh informers, wired as the manager wires them, and
// stops it when the test ends. With the WorkloadWithJob gate on, it reads
// Workloads and PodGroups as the manager's does.
func StartJobController(t testing.TB, opts jobcontroller.Options, configure func(*rest.Config)) *JobControllerRun {
	t.Helper()
	cfg := Config()
	cfg.QPS, cfg.Burst = 500, 1000
	if configure != nil {
		configure(cfg)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// As the manager wires it: pod writes answered in the client's encoding,
	// the metadata client for the pods outside the Job label (JobPodsOnly).
	if opts.ContentType == "" {
		opts.ContentType = cfg.ContentType
	}
	if opts.Metadata == nil {
		if opts.Metadata, err = metadata.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	// Logs go to klog, which Main sends to the control plane's log file.
	ctx, cancel := context.WithCancel(context.Background())
	// Jobs from the shared factory, pods from an informer of the pods with
	// the Job label only, the rest watched by the controller itself.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform))
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(manager.CacheTransform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = batchv1.ControllerUidLabel }))
	opts.JobPodsOnly, opts.PodTransform = true, manager.CacheTransform
	if utilfeature.DefaultFeatureGate.Enabled(features.WorkloadWithJob) {
		opts.Workloads = &jobcontroller.WorkloadInformers{
			Workloads: factory.Scheduling().V1alpha2().Workloads(),
			PodGroups: factory.Scheduling().V1alpha2().PodGroups(),
		}
	}
	c, err := jobcontroller.NewController(ctx, podFactory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	r := &JobControllerRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		c.Run(ctx, 5)
		factory.Shutdown()
		podFactory.Shutdown()
	}()
	t.Cleanup(r.Stop)
	return r
}
