package main

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// TestMetricsCommand runs `jobkeeper metrics` against a TLS server playing
// up's metrics endpoint: it finds the address in the data directory,
// verifies the server with the kubeconfig's CA, sends the credentials of
// the jobkeeper context even when another one is current, and reports a
// refusal with its status.
func TestMetricsCommand(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/metrics":
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer admin-token":
			http.Error(w, `forbidden: User "someone" cannot get path "/metrics"`, http.StatusForbidden)
		default:
			w.Write([]byte("# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"job\"} 0\n"))
		}
	}))
	defer srv.Close()
	dataDir := t.TempDir()
	remove, err := controlplane.WriteMetricsAddress(dataDir, strings.TrimPrefix(srv.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	ca := pemCert(t, srv)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://unused.invalid", CertificateAuthorityData: ca}
	kc.AuthInfos[controlplane.ContextName] = &clientcmdapi.AuthInfo{Token: "admin-token"}
	kc.AuthInfos["other"] = &clientcmdapi.AuthInfo{Token: "other-token"}
	kc.Contexts[controlplane.ContextName] = &clientcmdapi.Context{Cluster: "c", AuthInfo: controlplane.ContextName}
	kc.Contexts["other"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "other"}
	kc.CurrentContext = "other"
	if err := clientcmd.WriteToFile(*kc, filepath.Join(dataDir, "kubeconfig")); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, error) {
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"metrics", "--data-dir", dataDir}, args...))
		err := root.Execute()
		return out.String(), err
	}
	if out, err := run(); err != nil || !strings.Contains(out, "# TYPE workqueue_depth gauge") {
		t.Errorf("metrics = %q, %v", out, err)
	}

	// Without the jobkeeper context, the current one's credentials go, and
	// a refusal says so.
	delete(kc.Contexts, controlplane.ContextName)
	other := filepath.Join(t.TempDir(), "other")
	if err := clientcmd.WriteToFile(*kc, other); err != nil {
		t.Fatal(err)
	}
	if _, err := run("--kubeconfig", other); err == nil || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Errorf("metrics with credentials RBAC refuses: %v, want the 403", err)
	}

	remove()
	if _, err := run(); err == nil || !strings.Contains(err.Error(), "no jobkeeper up serves metrics on data directory "+dataDir) {
		t.Errorf("metrics with no up running: %v", err)
	}
}

// pemCert returns the PEM of srv's certificate.
func pemCert(t *testing.T, srv *httptest.Server) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := writePEMCert(&b, srv.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestMetricsCommandFlags(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	def := filepath.Join(home, ".jobkeeper")
	cases := map[string]struct {
		dataDir, kubeconfigOut, want string
	}{
		"defaults":           {dataDir: def, kubeconfigOut: filepath.Join(def, "kubeconfig"), want: ""},
		"another data dir":   {dataDir: "/srv/jk", kubeconfigOut: "/srv/jk/kubeconfig", want: " --data-dir /srv/jk"},
		"another kubeconfig": {dataDir: def, kubeconfigOut: "/home/u/.kube/config", want: " --kubeconfig /home/u/.kube/config"},
		"quoted":             {dataDir: "/tmp/my dir", kubeconfigOut: "/tmp/it's", want: " --data-dir '/tmp/my dir' --kubeconfig '/tmp/it'\\''s'"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := metricsCommandFlags(tc.dataDir, tc.kubeconfigOut); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// writePEMCert writes der as a PEM certificate block.
func writePEMCert(w *bytes.Buffer, der []byte) error {
	return pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: der})
}
