package nodeagent_test

import (
	"context"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent"
)

// ExampleNew runs a node agent against the control plane of a kubeconfig
// until SIGINT or SIGTERM, serving container logs to the apiserver.
func ExampleNew() {
	cfg, err := clientcmd.BuildConfigFromFlags("", "/var/lib/jobkeeper/kubeconfig")
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	agent, err := nodeagent.New(client, nodeagent.Options{
		NodeName:        "laptop",
		MaxPods:         110,
		Runtime:         "process",
		DataDir:         "/var/lib/jobkeeper/node",
		ServingCertFile: "/var/lib/jobkeeper/pki/node-serving.crt",
		ServingKeyFile:  "/var/lib/jobkeeper/pki/node-serving.key",
		ClientCAFile:    "/var/lib/jobkeeper/pki/ca.crt",
	})
	if err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx); err != nil {
		panic(err)
	}
}
