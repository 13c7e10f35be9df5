package controlplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// dataDirEntries are the entries Start and `jobkeeper up` create at the top
// of a data directory. Reset removes a directory only if it holds nothing
// else (apart from the temporary files of dataDirTempPrefixes).
var dataDirEntries = map[string]bool{
	"lock":                 true, // the lock file (lock.go)
	"pki":                  true, // certificates and keys (pki.go)
	"etcd":                 true, // etcd's data and ports (etcd.go)
	"logs":                 true, // the logs (logs.go)
	"kubeconfig":           true, // the default admin kubeconfig
	"node":                 true, // the node agent's pod files
	"images":               true, // the node agent's image store (pkg/images)
	"volumes":              true, // the local-path PersistentVolumes (pkg/localpath)
	portFileName:           true, // the apiserver's last port (port.go)
	metricsAddressFileName: true, // where up serves /metrics while it runs (metricsaddr.go)
	MetricsAPIKubeconfig:   true, // the resource metrics API's credentials (up)
}

// MetricsAPIKubeconfig is the file of the data directory that holds the
// resource metrics API server's credentials (its delegated authentication
// and authorization read a kubeconfig file).
const MetricsAPIKubeconfig = "metrics-api.kubeconfig"

// dataDirTempPrefixes name the temporary files an interrupted write can
// leave at the top of a data directory.
var dataDirTempPrefixes = []string{".write-test-", ".kubeconfig-test-", ".kubeconfig.tmp-", "." + portFileName + ".tmp-", "." + metricsAddressFileName + ".tmp-", "." + MetricsAPIKubeconfig + ".tmp-"}

// Reset removes the data directory dir and everything in it, and returns the
// entries it removed. It refuses, removing nothing, when dir is not a
// jobkeeper data directory (it holds an entry Start does not create, or none
// of etcd and pki), when a running control plane holds its lock, or when a
// file system is mounted under it (removing would reach into that file
// system), but for the tmpfs of a node pod's memory-backed emptyDir, which
// it unmounts. A symbolic link given as dir is followed; none under it is. It
// stops no process and touches nothing outside dir.
func Reset(dir string) ([]string, error) {
	// Work on the real path, so that the mount check sees what is removed.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, unwrapPathError(err))
	}
	dir = real
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, unwrapPathError(err))
	}
	if err := checkDataDir(dir, entries); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("not resetting: %w; stop it first", err)
	}
	defer lock.release()
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, fmt.Errorf("listing mount points under %s: %w", dir, err)
	}
	var points []string
	for _, m := range mounts {
		// The directory itself may be a mount point; what is under it may
		// not, but for a memory-backed emptyDir of a pod of up's node (a
		// tmpfs a killed up left), whose data goes with the reset anyway.
		if m.Mountpoint == dir {
			continue
		}
		if ok, _ := filepath.Match(filepath.Join(dir, "node", "pods", "*", "volumes", "*"), m.Mountpoint); ok && m.FSType == "tmpfs" {
			if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err == nil {
				continue
			}
		}
		points = append(points, m.Mountpoint)
	}
	if len(points) > 0 {
		return nil, fmt.Errorf("not resetting %s: file systems are mounted under it (%s); unmount them first", dir, strings.Join(points, ", "))
	}
	var removed []string
	for _, e := range entries {
		if e.Name() == "lock" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(path); err != nil {
			return removed, fmt.Errorf("removing %s: %w", path, err)
		}
		removed = append(removed, path)
	}
	lockPath := filepath.Join(dir, "lock")
	if err := os.Remove(lockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return removed, fmt.Errorf("removing %s: %w", lockPath, err)
	}
	removed = append(removed, lockPath)
	if err := os.Remove(dir); err != nil {
		return removed, fmt.Errorf("removing %s: %w", dir, err)
	}
	return append(removed, dir), nil
}

// checkDataDir reports why dir, holding entries, is not a data directory
// that Reset may remove.
func checkDataDir(dir string, entries []os.DirEntry) error {
	var unknown []string
	var core bool
	for _, e := range entries {
		name := e.Name()
		switch {
		case dataDirEntries[name]:
			core = core || name == "etcd" || name == "pki"
		case hasAnyPrefix(name, dataDirTempPrefixes):
		default:
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("not resetting %s: it is not a jobkeeper data directory (it holds %s, which jobkeeper does not create)", dir, strings.Join(unknown, ", "))
	}
	if !core {
		return fmt.Errorf("not resetting %s: it is not a jobkeeper data directory (no etcd or pki in it)", dir)
	}
	return nil
}

// hasAnyPrefix reports whether s starts with one of prefixes.
func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
