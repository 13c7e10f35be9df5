package controlplane

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// etcdSocketName is the file name of etcd's client socket in its directory.
const etcdSocketName = "etcd.sock"

// maxUnixSocketPath is the longest path a unix socket can be bound at on
// Linux (sun_path holds 108 bytes, the last a NUL).
const maxUnixSocketPath = 107

// etcdSocket returns where etcd's client socket goes: in etcdDir, which
// only this user can enter (0700), so the socket's owner alone can read
// etcd. When that path is too long for a unix socket, the socket goes in a
// new private (0700) temporary directory instead, which cleanup removes.
func etcdSocket(etcdDir string) (path string, cleanup func(), err error) {
	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("creating etcd directory: %w", err)
	}
	// An etcd directory made by an older jobkeeper, or by hand, may be
	// open to others; the socket's protection is this mode.
	if err := os.Chmod(etcdDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("making etcd directory private: %w", err)
	}
	path = filepath.Join(etcdDir, etcdSocketName)
	if len(path) <= maxUnixSocketPath {
		return path, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "jobkeeper-etcd-")
	if err != nil {
		return "", nil, fmt.Errorf("creating a directory for etcd's socket (%s is too long for one): %w", path, err)
	}
	return filepath.Join(dir, etcdSocketName), func() { os.RemoveAll(dir) }, nil
}

// startEtcd starts a single-member etcd with its data under dir, serving
// clients on the unix socket at socket only, and returns it once it serves
// clients, with the endpoint the apiserver's etcd client dials.
//
// etcd opens no TCP port: its clients (the apiserver, in this process) use
// the socket, and a single member has no peer to talk to, so no peer
// listener is configured. Only the member's advertised URLs remain, which
// etcd requires in host:port form and nothing dials.
//
// etcd's log lines, and those of the apiserver's etcd clients
// (redirectEtcdClientLog), go to logFile, never to the terminal.
func startEtcd(ctx context.Context, dir, socket, logFile string) (*embed.Etcd, string, error) {
	log := newRotatingLog(logFile)
	redirectEtcdClientLog(log)
	clientURL := url.URL{Scheme: "unix", Path: socket}

	cfg := embed.NewConfig()
	cfg.Name = "jobkeeper"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = nil
	// NewConfig's defaults (http://localhost:2379 and :2380) stay as the
	// member's advertised URLs; a data directory from an older jobkeeper
	// keeps the loopback peer URL its member record holds, which nothing
	// dials either.
	cfg.InitialCluster = cfg.Name + "=" + cfg.AdvertisePeerUrls[0].String()
	// One member on loopback: nothing to wait for from peers, so a short
	// election timeout only shortens the first election (with the defaults,
	// 100ms ticks and a 1s timeout, etcd took 0.2-1.1s to be ready). A single
	// member cannot lose its own quorum, so a short timeout cannot cause a
	// leader change under load.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	// embed.NewConfig leaves the slow-request threshold at 0, unlike etcd's
	// command-line default, so every request was logged as a slow-request
	// warning (about 65 MB a day idle).
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newEtcdLogger(log, zapcore.WarnLevel))
	// Compact history regularly, as kube-apiserver asks it to
	// (compactionInterval), for a data directory served without it.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = compactionInterval.String()
	cfg.QuotaBackendBytes = 8 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd did not become ready within 60s (log: %s)", logFile)
	case <-ctx.Done():
		e.Close()
		return nil, "", ctx.Err()
	}
	// The socket is created with the process's umask; the directory already
	// keeps others out, this only says so on the file too.
	if err := os.Chmod(socket, 0o600); err != nil {
		e.Close()
		return nil, "", fmt.Errorf("restricting etcd's socket: %w", err)
	}
	return e, clientURL.String(), nil
}
