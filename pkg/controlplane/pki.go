package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Common names and organisations of the certificates the control plane issues.
const (
	// AdminCommonName is the user of the admin kubeconfig.
	AdminCommonName = "jobkeeper-admin"
	// MastersGroup is the group that the default RBAC policy makes cluster-admin.
	MastersGroup = "system:masters"
	// KubeletClientCommonName is the identity the apiserver presents to the node agent.
	KubeletClientCommonName = "kube-apiserver-kubelet-client"
	// caValidity and leafValidity are how long generated certificates last.
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 5 * 365 * 24 * time.Hour
)

// PKI names the files of the control plane's certificates under
// <data-dir>/pki. All leaf certificates are signed by the one CA.
type PKI struct {
	// Dir is the directory holding every file below.
	Dir string
}

// File paths inside the PKI directory.
func (p PKI) CACert() string            { return filepath.Join(p.Dir, "ca.crt") }
func (p PKI) CAKey() string             { return filepath.Join(p.Dir, "ca.key") }
func (p PKI) ServingCert() string       { return filepath.Join(p.Dir, "apiserver.crt") }
func (p PKI) ServingKey() string        { return filepath.Join(p.Dir, "apiserver.key") }
func (p PKI) AdminCert() string         { return filepath.Join(p.Dir, "admin.crt") }
func (p PKI) AdminKey() string          { return filepath.Join(p.Dir, "admin.key") }
func (p PKI) KubeletClientCert() string { return filepath.Join(p.Dir, "apiserver-kubelet-client.crt") }
func (p PKI) KubeletClientKey() string  { return filepath.Join(p.Dir, "apiserver-kubelet-client.key") }
func (p PKI) NodeServingCert() string   { return filepath.Join(p.Dir, "node-serving.crt") }
func (p PKI) NodeServingKey() string    { return filepath.Join(p.Dir, "node-serving.key") }
func (p PKI) ServiceAccountKey() string { return filepath.Join(p.Dir, "service-account.key") }

// The front proxy's CA and the client certificate the aggregator
// presents to aggregated API servers (the kubeadm layout's
// front-proxy-ca and front-proxy-client), and the serving certificate of
// the resource metrics API (valid for its Service, MetricsServiceHost).
func (p PKI) FrontProxyCACert() string     { return filepath.Join(p.Dir, "front-proxy-ca.crt") }
func (p PKI) FrontProxyCAKey() string      { return filepath.Join(p.Dir, "front-proxy-ca.key") }
func (p PKI) FrontProxyClientCert() string { return filepath.Join(p.Dir, "front-proxy-client.crt") }
func (p PKI) FrontProxyClientKey() string  { return filepath.Join(p.Dir, "front-proxy-client.key") }
func (p PKI) MetricsServingCert() string   { return filepath.Join(p.Dir, "metrics-serving.crt") }
func (p PKI) MetricsServingKey() string    { return filepath.Join(p.Dir, "metrics-serving.key") }

// FrontProxyClientCommonName is the aggregator's identity at the
// aggregated API servers, the only one they take X-Remote-* headers from.
const FrontProxyClientCommonName = "front-proxy-client"

// The Service the resource metrics API is registered behind, and the
// host name its serving certificate is for (the aggregator checks it).
const (
	MetricsServiceNamespace = "kube-system"
	MetricsServiceName      = "jobkeeper-metrics"
	MetricsServiceHost      = MetricsServiceName + "." + MetricsServiceNamespace + ".svc"
)

// leaf describes one certificate to issue.
type leaf struct {
	cert, key string
	subject   pkix.Name
	usage     x509.ExtKeyUsage
	dnsNames  []string
	ips       []net.IP
}

// Ensure creates every missing file of the PKI and leaves existing ones
// untouched, so a restarted control plane keeps its identity and old
// kubeconfigs keep working. Files are written atomically (temp file + rename)
// so an interrupted start never leaves half a key behind. nodeIPs are
// the node agent's addresses besides loopback, in its serving certificate:
// a certificate missing an address it needs is issued again (by the same
// CA, so nothing else changes).
func (p PKI) Ensure(serviceIP net.IP, nodeIPs ...net.IP) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("creating PKI directory: %w", err)
	}
	caCert, caKey, err := p.ensureCA(p.CACert(), p.CAKey(), "jobkeeper-ca")
	if err != nil {
		return err
	}
	proxyCACert, proxyCAKey, err := p.ensureCA(p.FrontProxyCACert(), p.FrontProxyCAKey(), "jobkeeper-front-proxy-ca")
	if err != nil {
		return err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	leaves := []leaf{
		{
			cert: p.ServingCert(), key: p.ServingKey(),
			subject:  pkix.Name{CommonName: "kube-apiserver"},
			usage:    x509.ExtKeyUsageServerAuth,
			dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			ips:      append(loopback, serviceIP),
		},
		{
			cert: p.AdminCert(), key: p.AdminKey(),
			subject: pkix.Name{CommonName: AdminCommonName, Organization: []string{MastersGroup}},
			usage:   x509.ExtKeyUsageClientAuth,
		},
		{
			cert: p.KubeletClientCert(), key: p.KubeletClientKey(),
			subject: pkix.Name{CommonName: KubeletClientCommonName, Organization: []string{MastersGroup}},
			usage:   x509.ExtKeyUsageClientAuth,
		},
		{
			cert: p.NodeServingCert(), key: p.NodeServingKey(),
			subject:  pkix.Name{CommonName: "jobkeeper-node"},
			usage:    x509.ExtKeyUsageServerAuth,
			dnsNames: []string{"localhost"},
			ips:      append(slices.Clip(loopback), nodeIPs...),
		},
	}
	leaves = append(leaves, leaf{
		cert: p.MetricsServingCert(), key: p.MetricsServingKey(),
		subject:  pkix.Name{CommonName: MetricsServiceHost},
		usage:    x509.ExtKeyUsageServerAuth,
		dnsNames: []string{MetricsServiceHost, "localhost"},
		ips:      loopback,
	})
	for _, l := range leaves {
		if fileExists(l.cert) && fileExists(l.key) && usable(l) {
			continue
		}
		if err := issueLeaf(l, caCert, caKey); err != nil {
			return err
		}
	}
	proxyClient := leaf{
		cert: p.FrontProxyClientCert(), key: p.FrontProxyClientKey(),
		subject: pkix.Name{CommonName: FrontProxyClientCommonName},
		usage:   x509.ExtKeyUsageClientAuth,
	}
	if !fileExists(proxyClient.cert) || !fileExists(proxyClient.key) {
		if err := issueLeaf(proxyClient, proxyCACert, proxyCAKey); err != nil {
			return err
		}
	}
	if !fileExists(p.ServiceAccountKey()) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("generating service account signing key: %w", err)
		}
		if err := writeKey(p.ServiceAccountKey(), key); err != nil {
			return err
		}
	}
	return nil
}

// ensureCA reads the CA at certPath and keyPath, or creates it, named
// commonName.
func (p PKI) ensureCA(certPath, keyPath, commonName string) (*x509.Certificate, crypto.Signer, error) {
	if fileExists(certPath) && fileExists(keyPath) {
		cert, err := ReadCertificate(certPath)
		if err != nil {
			return nil, nil, err
		}
		key, err := readKey(keyPath)
		if err != nil {
			return nil, nil, err
		}
		return cert, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	// The key goes first: a CA certificate without its key would be useless
	// and Ensure would keep it forever.
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// usable reports whether the leaf's certificate and key on disk go
// together and the certificate names every one of its addresses: a
// certificate issued for fewer, or a key written without its certificate
// (a crash between the two), has it issued again.
func usable(l leaf) bool {
	pair, err := tls.LoadX509KeyPair(l.cert, l.key)
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return false
	}
	for _, ip := range l.ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func issueLeaf(l leaf, caCert *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", l.subject.CommonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(),
		Subject:      l.subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{l.usage},
		DNSNames:     l.dnsNames,
		IPAddresses:  l.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("signing certificate for %s: %w", l.subject.CommonName, err)
	}
	if err := writeKey(l.key, key); err != nil {
		return err
	}
	return writeFileAtomic(l.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// ReadCertificate parses the first PEM certificate in path.
func ReadCertificate(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate %s: %w", path, err)
	}
	return cert, nil
}

func readKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM key", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if ec, ecErr := x509.ParseECPrivateKey(block.Bytes); ecErr == nil {
			return ec, nil
		}
		return nil, fmt.Errorf("parsing key %s: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key %s cannot sign", path)
	}
	return signer, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key %s: %w", path, err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so readers never see a partial file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	name := tmp.Name()
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(name, mode); err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(fmt.Sprintf("reading random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}
