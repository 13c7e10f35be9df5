// Command inclusterlist is the program of the in-cluster API access test
// (test/e2e/incluster_test.go): with client-go's in-cluster configuration
// (KUBERNETES_SERVICE_HOST and _PORT, the mounted ServiceAccount token and
// ca.crt) it lists the pods of its own namespace and prints how many there
// are, or the error and exits 1 (2 when there is no in-cluster
// configuration at all). It first prints the apiserver's URL and how long
// the mounted token has left, in whole days.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

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
	if days, err := tokenDaysLeft(cfg.BearerTokenFile); err != nil {
		fmt.Println("token:", err)
	} else {
		fmt.Printf("token expires in %d days\n", days)
	}
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

// tokenDaysLeft reads the JWT at path and returns the whole days until its
// exp claim.
func tokenDaysLeft(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	parts := strings.Split(strings.TrimSpace(string(raw)), ".")
	if len(parts) != 3 {
		return 0, fmt.Errorf("not a JWT: %d parts", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return 0, fmt.Errorf("decoding the claims: %w", err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return 0, fmt.Errorf("parsing the claims: %w", err)
	}
	return int(time.Until(time.Unix(claims.Exp, 0)).Hours() / 24), nil
}
