package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
	"jobkeeper.dev/jobkeeper/pkg/metricsapi"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
)

// metricsAPIService is the APIService of the resource metrics API, named
// as a cluster names metrics-server's.
const metricsAPIService = "v1beta1.metrics.k8s.io"

// metricsAPI is the resource metrics API of up (pkg/metricsapi): its
// listener is bound before the control plane starts, so that the
// aggregator knows where the APIService's Service is served.
type metricsAPI struct {
	ln net.Listener
}

// newMetricsAPI binds the resource metrics API's loopback port.
func newMetricsAPI() (*metricsAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the resource metrics API: %w", err)
	}
	return &metricsAPI{ln: ln}, nil
}

// localServices is where the control plane's aggregator finds it.
func (m *metricsAPI) localServices() map[types.NamespacedName]*url.URL {
	return map[types.NamespacedName]*url.URL{
		{Namespace: controlplane.MetricsServiceNamespace, Name: controlplane.MetricsServiceName}: {Scheme: "https", Host: m.ln.Addr().String()},
	}
}

// register creates (or updates) the Service and the APIService of the
// resource metrics API. The Service is an ExternalName one: its name is
// what the aggregator checks the serving certificate against, and
// nothing here routes a ClusterIP (the aggregator resolves it to the
// loopback port, localServices).
func (m *metricsAPI) register(ctx context.Context, admin *rest.Config) error {
	ca := admin.CAData
	if len(ca) == 0 {
		var err error
		if ca, err = os.ReadFile(admin.CAFile); err != nil {
			return err
		}
	}
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: controlplane.MetricsServiceName, Namespace: controlplane.MetricsServiceNamespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "jobkeeper"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: controlplane.MetricsServiceHost,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the resource metrics API's Service: %w", err)
	}
	agg, err := aggregator.NewForConfig(admin)
	if err != nil {
		return err
	}
	want := &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: metricsAPIService, Labels: map[string]string{"app.kubernetes.io/managed-by": "jobkeeper"}},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.k8s.io", Version: "v1beta1",
			Service:              &apiregistrationv1.ServiceReference{Namespace: svc.Namespace, Name: svc.Name, Port: ptr.To[int32](443)},
			CABundle:             ca,
			GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}
	// The aggregator writes the APIService's status meanwhile (a restarted
	// up finds the last run's): an update that conflicts is tried again.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, metricsAPIService, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = agg.ApiregistrationV1().APIServices().Create(ctx, want, metav1.CreateOptions{})
			return err
		case err != nil:
			return err
		case equality.Semantic.DeepEqual(got.Spec, want.Spec):
			return nil
		}
		// A metrics-server installed by hand is replaced by up's own.
		got.Spec = want.Spec
		_, err = agg.ApiregistrationV1().APIServices().Update(ctx, got, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("registering the resource metrics API: %w", err)
	}
	return nil
}

// start serves the API from the agent's samples until ctx ends.
func (m *metricsAPI) start(ctx context.Context, cp *controlplane.ControlPlane, agent *nodeagent.Agent) error {
	pki := cp.PKI()
	kubeconfig := filepath.Join(cp.DataDir(), controlplane.MetricsAPIKubeconfig)
	kc, err := controlplane.AdminKubeconfig(cp.URL(), pki)
	if err != nil {
		return err
	}
	if err := controlplane.WriteKubeconfig(kubeconfig, kc); err != nil {
		return err
	}
	srv := metricsapi.New(metricsapi.Config{
		Listener: m.ln, CertFile: pki.MetricsServingCert(), KeyFile: pki.MetricsServingKey(),
		Kubeconfig: kubeconfig, NodeName: agent.NodeName(), Resolution: nodeagent.StatsInterval,
	})
	agent.Stats().OnCollect(srv.Store)
	go func() {
		if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "The resource metrics API stopped")
		}
	}()
	return nil
}
