package controlplane

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the name of the cluster, user and context in the admin kubeconfig.
const ContextName = "jobkeeper"

// AdminKubeconfig builds a kubeconfig for server that authenticates with the
// admin client certificate. Certificates and keys are embedded, so the file
// works wherever it is copied.
func AdminKubeconfig(server string, pki PKI) (*clientcmdapi.Config, error) {
	ca, err := os.ReadFile(pki.CACert())
	if err != nil {
		return nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	cert, err := os.ReadFile(pki.AdminCert())
	if err != nil {
		return nil, fmt.Errorf("reading admin certificate: %w", err)
	}
	key, err := os.ReadFile(pki.AdminKey())
	if err != nil {
		return nil, fmt.Errorf("reading admin key: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName, Namespace: "default"}
	cfg.CurrentContext = ContextName
	return cfg, nil
}

// WriteKubeconfig writes cfg to path atomically with mode 0600.
func WriteKubeconfig(path string, cfg *clientcmdapi.Config) error {
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return writeFileAtomic(path, data, 0o600)
}
