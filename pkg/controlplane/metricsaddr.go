package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// metricsAddressFileName is the file in the data directory that holds the
// address jobkeeper up serves its own /metrics on while it runs, for
// `jobkeeper metrics` to find.
const metricsAddressFileName = "metrics-address"

// WriteMetricsAddress records addr (host:port) as where dataDir's running
// jobkeeper serves /metrics. It returns a function that removes the record
// again, for the stop.
func WriteMetricsAddress(dataDir, addr string) (remove func(), err error) {
	path := filepath.Join(dataDir, metricsAddressFileName)
	if err := writeFileAtomic(path, []byte(addr+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("recording the metrics address: %w", err)
	}
	return func() { os.Remove(path) }, nil
}

// ReadMetricsAddress returns the address WriteMetricsAddress recorded in
// dataDir. No record means no jobkeeper serves metrics on it: none runs
// there, or it runs with --metrics-bind-address=0.
func ReadMetricsAddress(dataDir string) (string, error) {
	path := filepath.Join(dataDir, metricsAddressFileName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no jobkeeper up serves metrics on data directory %s (%s does not exist: is up running there, without --metrics-bind-address=0?)", dataDir, path)
	}
	if err != nil {
		return "", fmt.Errorf("reading the metrics address: %w", err)
	}
	addr := strings.TrimSpace(string(data))
	if addr == "" {
		return "", fmt.Errorf("the metrics address in %s is empty", path)
	}
	return addr, nil
}
