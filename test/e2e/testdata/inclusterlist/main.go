// Command inclusterlist is the program of the in-cluster API access test
// (test/e2e/incluster_test.go): with client-go's in-cluster configuration
// (KUBERNETES_SERVICE_HOST and _PORT, the mounted ServiceAccount token and
// ca.crt) it lists the pods of its own namespace and prints how many there
// are, or the error and exits 1 (2 when there is no in-cluster
// configuration at all).
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// namespaceFile is where the ServiceAccount volume puts the pod's namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func main() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Println("in-cluster config:", err)
		os.Exit(2)
	}
	fmt.Println("apiserver:", cfg.Host)
	ns, err := os.ReadFile(namespaceFile)
	if err != nil {
		fmt.Println("namespace:", err)
		os.Exit(2)
	}
	client, err := corev1client.NewForConfig(cfg)
	if err != nil {
		fmt.Println("client:", err)
		os.Exit(2)
	}
	pods, err := client.Pods(strings.TrimSpace(string(ns))).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		fmt.Println("listing pods:", err)
		os.Exit(1)
	}
	fmt.Printf("pods in %s: %d\n", ns, len(pods.Items))
}
