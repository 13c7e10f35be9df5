package controlplane

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ours is the configuration `up` merges: one cluster, user and context
// named ContextName.
func ours(server string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{Token: "ours"}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	return cfg
}

// theirs is a user's kubeconfig with another cluster, current, and a stale
// entry of ours.
func theirs() *clientcmdapi.Config {
	cfg := ours("https://127.0.0.1:1")
	cfg.Clusters["kind-dev"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:40000"}
	cfg.AuthInfos["kind-dev"] = &clientcmdapi.AuthInfo{Token: "theirs"}
	cfg.Contexts["kind-dev"] = &clientcmdapi.Context{Cluster: "kind-dev", AuthInfo: "kind-dev", Namespace: "work"}
	cfg.CurrentContext = "kind-dev"
	return cfg
}

func TestMergeKubeconfig(t *testing.T) {
	cases := map[string]struct {
		// existing is written at the path first, unless nil.
		existing *clientcmdapi.Config
		mode     os.FileMode
		// symlink makes the path a link to the file.
		symlink  bool
		wantMode os.FileMode
		// wantTightened is the former mode MergeKubeconfig reports.
		wantTightened os.FileMode
		// wantContexts are the contexts afterwards, with their clusters.
		wantContexts map[string]string
	}{
		"no file": {
			wantMode:     0o600,
			wantContexts: map[string]string{ContextName: "https://127.0.0.1:6443"},
		},
		"other contexts kept, ours replaced": {
			existing:     theirs(),
			mode:         0o600,
			wantMode:     0o600,
			wantContexts: map[string]string{ContextName: "https://127.0.0.1:6443", "kind-dev": "https://127.0.0.1:40000"},
		},
		"readable by others: tightened": {
			existing:      theirs(),
			mode:          0o644,
			wantMode:      0o600,
			wantTightened: 0o644,
			wantContexts:  map[string]string{ContextName: "https://127.0.0.1:6443", "kind-dev": "https://127.0.0.1:40000"},
		},
		"owner read-only: kept": {
			existing:     theirs(),
			mode:         0o400,
			wantMode:     0o400,
			wantContexts: map[string]string{ContextName: "https://127.0.0.1:6443", "kind-dev": "https://127.0.0.1:40000"},
		},
		"through a symbolic link": {
			existing:     theirs(),
			mode:         0o600,
			symlink:      true,
			wantMode:     0o600,
			wantContexts: map[string]string{ContextName: "https://127.0.0.1:6443", "kind-dev": "https://127.0.0.1:40000"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "config")
			file := path
			if tc.symlink {
				file = filepath.Join(dir, "real-config")
				if err := os.Symlink(file, path); err != nil {
					t.Fatal(err)
				}
			}
			if tc.existing != nil {
				if err := clientcmd.WriteToFile(*tc.existing, file); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(file, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			tightened, err := MergeKubeconfig(path, ours("https://127.0.0.1:6443"))
			if err != nil {
				t.Fatal(err)
			}
			if tightened != tc.wantTightened {
				t.Errorf("tightened from %#o, want %#o", tightened, tc.wantTightened)
			}
			got, err := clientcmd.LoadFromFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if got.CurrentContext != ContextName {
				t.Errorf("current context %q, want %q", got.CurrentContext, ContextName)
			}
			contexts := map[string]string{}
			for name, c := range got.Contexts {
				contexts[name] = got.Clusters[c.Cluster].Server
			}
			if diff := cmp.Diff(tc.wantContexts, contexts); diff != "" {
				t.Errorf("contexts (-want +got):\n%s", diff)
			}
			if tc.existing != nil && got.Contexts["kind-dev"].Namespace != "work" {
				t.Errorf("the other context lost its namespace: %+v", got.Contexts["kind-dev"])
			}
			st, err := os.Lstat(file)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.wantMode {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.wantMode)
			}
			if tc.symlink {
				if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeSymlink == 0 {
					t.Errorf("the symbolic link was replaced (%v, %v)", st, err)
				}
			}
		})
	}
}

func TestMergeKubeconfigInvalidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	junk := []byte("this: [is not a kubeconfig\n")
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckKubeconfigPath(path); err == nil {
		t.Error("CheckKubeconfigPath accepted an invalid kubeconfig")
	}
	if _, err := MergeKubeconfig(path, ours("https://127.0.0.1:6443")); err == nil {
		t.Error("MergeKubeconfig merged into an invalid kubeconfig")
	}
	if got, _ := os.ReadFile(path); string(got) != string(junk) {
		t.Errorf("the invalid file was changed to %q", got)
	}
}
