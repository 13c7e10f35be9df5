package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the name of the cluster, user and context in the admin
// kubeconfig, and of the entries MergeKubeconfig adds to an existing one.
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

// MergeKubeconfig writes the clusters, users and contexts of cfg into the
// kubeconfig at path, as kind does: entries of the same names are replaced,
// every other entry and setting is kept, and cfg's current context becomes
// the current one. The file holds the admin's credentials, so it is written
// with mode 0600: a missing file is created so, and an existing one readable
// or writable by others is tightened to it, its former mode returned (0 when
// nothing was tightened). A symbolic link is followed, so the file it points to is
// updated. The file is replaced atomically; a file that is not a valid
// kubeconfig is an error and is left as it is.
func MergeKubeconfig(path string, cfg *clientcmdapi.Config) (tightened os.FileMode, err error) {
	target, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		target = path
	} else if err != nil {
		return 0, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	merged := clientcmdapi.NewConfig()
	mode := os.FileMode(0o600)
	if st, err := os.Stat(target); err == nil {
		mode = st.Mode().Perm()
		if mode&0o077 != 0 {
			tightened, mode = mode, mode&^0o077
		}
		if merged, err = clientcmd.LoadFromFile(target); err != nil {
			return 0, fmt.Errorf("kubeconfig %s exists and is not a valid kubeconfig, so it was left as it is (choose another --kubeconfig-out): %w", path, err)
		}
	}
	for name, c := range cfg.Clusters {
		merged.Clusters[name] = c
	}
	for name, a := range cfg.AuthInfos {
		merged.AuthInfos[name] = a
	}
	for name, c := range cfg.Contexts {
		merged.Contexts[name] = c
	}
	merged.CurrentContext = cfg.CurrentContext
	data, err := clientcmd.Write(*merged)
	if err != nil {
		return 0, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	if err := writeFileAtomic(target, data, mode); err != nil {
		return 0, err
	}
	return tightened, nil
}

// checkExistingKubeconfig reports an existing file at path that
// MergeKubeconfig could not merge into, before anything is started.
func checkExistingKubeconfig(path string) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if _, err := clientcmd.LoadFromFile(path); err != nil {
		return fmt.Errorf("kubeconfig %s exists and is not a valid kubeconfig, so it was left as it is (choose another --kubeconfig-out): %w", path, err)
	}
	return nil
}
