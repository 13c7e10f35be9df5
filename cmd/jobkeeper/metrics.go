package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"jobkeeper.dev/jobkeeper/pkg/controlplane"
)

// newMetricsCommand is `metrics`: jobkeeper up's own /metrics, read with
// the credentials of a kubeconfig, without the user finding the port or
// extracting the certificate.
func newMetricsCommand() *cobra.Command {
	var dataDir, kubeconfig string
	if home, err := os.UserHomeDir(); err == nil {
		dataDir = filepath.Join(home, ".jobkeeper")
	}
	cmd := &cobra.Command{
		Use:   "metrics",
		Short: "Print the Prometheus metrics of the jobkeeper up running on --data-dir",
		Long: `Print the /metrics of the jobkeeper up running on --data-dir (its controllers, workqueues and
client), in Prometheus' text format. up serves them on a port of its own, over HTTPS behind the
apiserver's authentication and authorization; this command finds the port in the data directory
and authenticates with the kubeconfig's credentials (default <data-dir>/kubeconfig; its context
"` + controlplane.ContextName + `", which up writes, else its current one), which RBAC must allow to
get the non-resource URL /metrics (the admin's can).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir must be set (no home directory to default to)")
			}
			if kubeconfig == "" {
				kubeconfig = filepath.Join(dataDir, "kubeconfig")
			}
			addr, err := controlplane.ReadMetricsAddress(dataDir)
			if err != nil {
				return err
			}
			cfg, err := metricsClientConfig(kubeconfig)
			if err != nil {
				return err
			}
			return fetchMetrics(cmd, cfg, "https://"+addr+"/metrics", cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", dataDir, "Data directory of the running jobkeeper up.")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig whose credentials are sent: those of its context \""+controlplane.ContextName+"\" if it has one, else of its current context (default <data-dir>/kubeconfig).")
	return cmd
}

// fetchMetrics GETs url with cfg's credentials and CA, and copies the body
// to out.
func fetchMetrics(cmd *cobra.Command, cfg *rest.Config, url string, out io.Writer) error {
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return fmt.Errorf("building a client from the kubeconfig: %w", err)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return fmt.Errorf("reading %s (is jobkeeper up running?): %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("reading %s: %s: %s", url, resp.Status, body)
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return nil
}

// metricsClientConfig loads the kubeconfig at path with the context up
// writes (controlplane.ContextName), so that a kubeconfig it was merged into
// works whatever its current context, or else with the current context.
func metricsClientConfig(path string) (*rest.Config, error) {
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	overrides := &clientcmd.ConfigOverrides{}
	if _, ok := raw.Contexts[controlplane.ContextName]; ok {
		overrides.CurrentContext = controlplane.ContextName
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// metricsCommandFlags are the flags `jobkeeper metrics` needs to find the
// metrics of an up run with dataDir and kubeconfigOut: none for the
// defaults.
func metricsCommandFlags(dataDir, kubeconfigOut string) string {
	var flags string
	if home, err := os.UserHomeDir(); err != nil || dataDir != filepath.Join(home, ".jobkeeper") {
		flags += " --data-dir " + shellQuote(dataDir)
	}
	if kubeconfigOut != filepath.Join(dataDir, "kubeconfig") {
		flags += " --kubeconfig " + shellQuote(kubeconfigOut)
	}
	return flags
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain
// path characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
