package ttlafterfinished_test

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
)

// Example_run wires the controller to a cluster: the shared informer factory
// is started after New registered its handlers, then Run blocks until the
// context ends.
func Example_run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"} // e.g. from a kubeconfig
	client := kubernetes.NewForConfigOrDie(cfg)
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{
		Registerer: prometheus.NewRegistry(),
	}, ttlafterfinished.Clients{
		Client:  client,
		Dynamic: dynamic.NewForConfigOrDie(cfg),
	}, factory)
	if err != nil {
		panic(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx, 5)
}
