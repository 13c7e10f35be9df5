package controlplane

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestPKIEnsure(t *testing.T) {
	p := PKI{Dir: filepath.Join(t.TempDir(), "pki")}
	if err := p.Ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	ca, err := ReadCertificate(p.CACert())
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA {
		t.Errorf("CA certificate is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	cases := map[string]struct {
		cert      string
		usage     x509.ExtKeyUsage
		dnsName   string
		ip        string
		cn        string
		org       string
		keyMode   os.FileMode
		keyOfCert string
	}{
		"apiserver serving":  {cert: p.ServingCert(), keyOfCert: p.ServingKey(), usage: x509.ExtKeyUsageServerAuth, dnsName: "kubernetes.default.svc", ip: "10.0.0.1"},
		"apiserver loopback": {cert: p.ServingCert(), keyOfCert: p.ServingKey(), usage: x509.ExtKeyUsageServerAuth, dnsName: "localhost", ip: "127.0.0.1"},
		"admin":              {cert: p.AdminCert(), keyOfCert: p.AdminKey(), usage: x509.ExtKeyUsageClientAuth, cn: AdminCommonName, org: MastersGroup},
		"kubelet client":     {cert: p.KubeletClientCert(), keyOfCert: p.KubeletClientKey(), usage: x509.ExtKeyUsageClientAuth, cn: KubeletClientCommonName},
		"node serving":       {cert: p.NodeServingCert(), keyOfCert: p.NodeServingKey(), usage: x509.ExtKeyUsageServerAuth, dnsName: "localhost", ip: "127.0.0.1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cert, err := ReadCertificate(tc.cert)
			if err != nil {
				t.Fatal(err)
			}
			opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}, DNSName: tc.dnsName}
			if _, err := cert.Verify(opts); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tc.ip != "" {
				if err := cert.VerifyHostname(tc.ip); err != nil {
					t.Errorf("IP SAN %s: %v", tc.ip, err)
				}
			}
			if tc.cn != "" && cert.Subject.CommonName != tc.cn {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, tc.cn)
			}
			if tc.org != "" && (len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != tc.org) {
				t.Errorf("O = %v, want %q", cert.Subject.Organization, tc.org)
			}
			st, err := os.Stat(tc.keyOfCert)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("key mode = %v, want 0600", st.Mode().Perm())
			}
			key, err := readKey(tc.keyOfCert)
			if err != nil {
				t.Fatal(err)
			}
			pub, _ := x509.MarshalPKIXPublicKey(key.Public())
			certPub, _ := x509.MarshalPKIXPublicKey(cert.PublicKey)
			if !bytes.Equal(pub, certPub) {
				t.Errorf("key does not match certificate")
			}
		})
	}
	if !fileExists(p.ServiceAccountKey()) {
		t.Errorf("service account key missing")
	}
}

// TestPKIEnsureKeepsExisting checks that a restart reuses the identity, so
// kubeconfigs written earlier keep working.
func TestPKIEnsureKeepsExisting(t *testing.T) {
	p := PKI{Dir: t.TempDir()}
	if err := p.Ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, f := range []string{p.CACert(), p.CAKey(), p.AdminCert(), p.ServingCert(), p.ServiceAccountKey()} {
		before[f], _ = os.ReadFile(f)
	}
	// Losing one leaf re-issues just that leaf, signed by the same CA.
	os.Remove(p.NodeServingCert())
	if err := p.Ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	for f, data := range before {
		after, _ := os.ReadFile(f)
		if !bytes.Equal(data, after) {
			t.Errorf("%s changed on the second Ensure", filepath.Base(f))
		}
	}
	ca, _ := ReadCertificate(p.CACert())
	node, err := ReadCertificate(p.NodeServingCert())
	if err != nil {
		t.Fatal(err)
	}
	if err := node.CheckSignatureFrom(ca); err != nil {
		t.Errorf("re-issued node certificate not signed by the CA: %v", err)
	}
}

// TestPKIEnsureNodeIPs: the node serving certificate names the node's
// addresses; one issued without an address now wanted is issued again,
// the others kept.
func TestPKIEnsureNodeIPs(t *testing.T) {
	p := PKI{Dir: t.TempDir()}
	if err := p.Ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	serving, _ := os.ReadFile(p.ServingCert())
	nodeIP := net.ParseIP("10.244.0.1")
	if err := p.Ensure(serviceIP, nodeIP); err != nil {
		t.Fatal(err)
	}
	node, err := ReadCertificate(p.NodeServingCert())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(node.IPAddresses, nodeIP.Equal) || !slices.ContainsFunc(node.IPAddresses, net.ParseIP("127.0.0.1").Equal) {
		t.Errorf("node serving certificate for %v", node.IPAddresses)
	}
	if after, _ := os.ReadFile(p.ServingCert()); !bytes.Equal(serving, after) {
		t.Error("the apiserver's certificate changed with the node's addresses")
	}
	// The same addresses again: kept.
	before, _ := os.ReadFile(p.NodeServingCert())
	if err := p.Ensure(serviceIP, nodeIP); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(p.NodeServingCert()); !bytes.Equal(before, after) {
		t.Error("the node serving certificate was issued again for the same addresses")
	}
	// A key that is not the certificate's (a crash between writing the
	// two): issued again.
	other, _ := os.ReadFile(p.AdminKey())
	if err := os.WriteFile(p.NodeServingKey(), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Ensure(serviceIP, nodeIP); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(p.NodeServingCert(), p.NodeServingKey()); err != nil {
		t.Errorf("after a mismatched key, the node serving pair: %v", err)
	}
}

func TestPKIEnsureUnwritable(t *testing.T) {
	// A file where the directory should be fails for root too, unlike
	// permission bits.
	base := t.TempDir()
	blocker := filepath.Join(base, "pki")
	if err := os.WriteFile(blocker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := PKI{Dir: blocker}.Ensure(serviceIP)
	if err == nil || !strings.Contains(err.Error(), "PKI directory") {
		t.Errorf("Ensure over a file: err = %v, want an error naming the PKI directory", err)
	}
}

func TestAdminKubeconfig(t *testing.T) {
	p := PKI{Dir: t.TempDir()}
	if err := p.Ensure(net.ParseIP("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	kc, err := AdminKubeconfig("https://127.0.0.1:6443", p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(path, kc); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode = %v, want 0600", st.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("host = %q", cfg.Host)
	}
	ca, _ := os.ReadFile(p.CACert())
	cert, _ := os.ReadFile(p.AdminCert())
	if !bytes.Equal(cfg.TLSClientConfig.CAData, ca) || !bytes.Equal(cfg.TLSClientConfig.CertData, cert) || len(cfg.TLSClientConfig.KeyData) == 0 {
		t.Errorf("kubeconfig does not embed the CA, admin certificate and key")
	}
	raw, _ := clientcmd.LoadFromFile(path)
	if raw.CurrentContext != ContextName {
		t.Errorf("current context = %q, want %q", raw.CurrentContext, ContextName)
	}
}

func TestCheckKubeconfigPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	cases := map[string]struct {
		path    string
		wantErr string
	}{
		"new file in existing dir": {path: filepath.Join(dir, "kc")},
		"existing file":            {path: file},
		"is a directory":           {path: dir, wantErr: "is a directory"},
		"missing parent":           {path: filepath.Join(dir, "nope", "kc"), wantErr: "does not exist"},
		"parent is a file":         {path: filepath.Join(file, "kc"), wantErr: "not a directory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckKubeconfigPath(tc.path)
			if tc.wantErr == "" && err != nil {
				t.Errorf("unexpected error: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	l, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another jobkeeper") {
		t.Errorf("second lock: err = %v, want 'in use by another jobkeeper'", err)
	}
	l.release()
	l2, err := lockDir(dir)
	if err != nil {
		t.Errorf("lock after release: %v", err)
	}
	l2.release()
}

func TestCheckPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if err := CheckPort(port); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("CheckPort(busy) = %v, want 'already in use'", err)
	}
	if err := CheckPort(0); err != nil {
		t.Errorf("CheckPort(0) = %v", err)
	}
	if err := CheckPort(70000); err == nil {
		t.Errorf("CheckPort(70000) = nil, want out of range")
	}
}
