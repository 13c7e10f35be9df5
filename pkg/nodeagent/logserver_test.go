package nodeagent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/process"
	"jobkeeper.dev/jobkeeper/test/builder"
)

// childEnv makes the test binary act as a container (see TestMain).
const childEnv = "JOBKEEPER_NODEAGENT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "print-index" {
		fmt.Println("first line")
		fmt.Printf("hello from %s\n", os.Getenv("JOB_COMPLETION_INDEX"))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate; it returns PEM cert and key.
func (ca *testCA) issue(t *testing.T, cn string, server bool) ([]byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLogEndpoint(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "control-plane-ca")
	serverCert, serverKey := ca.issue(t, "node-1", true)
	opts := Options{
		MaxPods:         10,
		Runtime:         process.Name,
		Images:          ImagesHost,
		ServingCertFile: writeFile(t, dir, "serving.crt", serverCert),
		ServingKeyFile:  writeFile(t, dir, "serving.key", serverKey),
		ClientCAFile:    writeFile(t, dir, "ca.crt", ca.pem),
	}
	pod := builder.MakePod("p", "ns").UID("u1").Command(os.Args[0]).Env(childEnv, "print-index").
		Annotation("batch.kubernetes.io/job-completion-index", "2").
		EnvFieldRef("JOB_COMPLETION_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']").Obj()
	ta := startAgentWith(t, opts, pod)
	ta.waitPod(t, "p", phaseIs(corev1.PodSucceeded))
	port := ta.agent.listener.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("https://127.0.0.1:%d/containerLogs/ns/p/main", port)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	clientWith := func(certPEM, keyPEM []byte) *http.Client {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}
	get := func(c *http.Client, query string) (int, string, error) {
		resp, err := c.Get(url + query)
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}

	apiserver := clientWith(ca.issue(t, DefaultAPIServerClientCN, false))
	cases := map[string]struct {
		query    string
		wantCode int
		wantBody string
	}{
		"whole log":       {wantCode: 200, wantBody: "first line\nhello from 2\n"},
		"tail":            {query: "?tailLines=1", wantCode: 200, wantBody: "hello from 2\n"},
		"limit":           {query: "?limitBytes=5", wantCode: 200, wantBody: "first"},
		"follow finished": {query: "?follow=true", wantCode: 200, wantBody: "first line\nhello from 2\n"},
		"no previous":     {query: "?previous=true", wantCode: 400, wantBody: "previous terminated container \"main\" in pod \"p\" not found\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body, err := get(apiserver, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("status = %d, want %d (body %q)", code, tc.wantCode, body)
			}
			if diff := cmp.Diff(tc.wantBody, body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}

	refused := map[string]*http.Client{
		"no client certificate":     clientWith(nil, nil),
		"another common name":       clientWith(ca.issue(t, "system:admin", false)),
		"certificate of another CA": clientWith(newCA(t, "other-ca").issue(t, DefaultAPIServerClientCN, false)),
	}
	for name, c := range refused {
		t.Run("refuses "+name, func(t *testing.T) {
			if code, body, err := get(c, ""); err == nil {
				t.Errorf("request succeeded with status %d and body %q; want a TLS failure", code, body)
			}
		})
	}
}
