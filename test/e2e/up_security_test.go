package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// namespaceDefaultsWithin is how soon after a namespace is created its
// default ServiceAccount and kube-root-ca.crt ConfigMap must exist.
const namespaceDefaultsWithin = 2 * time.Second

// TestUpNamespaceDefaults: a new namespace gets, within 2 s, the "default"
// ServiceAccount (upstream's serviceaccount controller) and the
// kube-root-ca.crt ConfigMap holding the CA that verifies the apiserver
// (upstream's root CA publisher); a TokenRequest for that ServiceAccount
// succeeds, and the token authenticates as the ServiceAccount over a
// connection verified with the published CA.
func TestUpNamespaceDefaults(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	up, c, kc := startUp(t, dataDir)
	defer up.stop(t)
	wantCA, err := os.ReadFile(filepath.Join(dataDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}

	ns := "fresh"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	var sa *corev1.ServiceAccount
	var cm *corev1.ConfigMap
	for (sa == nil || cm == nil) && time.Since(created) < namespaceDefaultsWithin {
		if sa == nil {
			if got, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
				sa = got
			}
		}
		if cm == nil {
			if got, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err == nil {
				cm = got
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sa == nil {
		t.Errorf("no default ServiceAccount in namespace %s within %s", ns, namespaceDefaultsWithin)
	}
	if cm == nil {
		t.Fatalf("no kube-root-ca.crt ConfigMap in namespace %s within %s", ns, namespaceDefaultsWithin)
	}
	t.Logf("both present %s after the namespace was created", time.Since(created).Round(time.Millisecond))
	if got := cm.Data["ca.crt"]; got != string(wantCA) {
		t.Errorf("kube-root-ca.crt holds ca.crt:\n%s\nwant the cluster CA:\n%s", got, wantCA)
	}
	if sa == nil {
		return
	}

	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/default: %v", ns, err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	// As a pod would: the bearer token, and the published CA as the only
	// trust root.
	asSA, err := kubernetes.NewForConfig(&rest.Config{
		Host:            admin.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(cm.Data["ca.crt"])},
	})
	if err != nil {
		t.Fatal(err)
	}
	review, err := asSA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("authenticating with the ServiceAccount token: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":default"; review.Status.UserInfo.Username != want {
		t.Errorf("the token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
}
