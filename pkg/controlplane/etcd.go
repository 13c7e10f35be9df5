package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// etcdPorts are the loopback ports of the embedded etcd. They are chosen on
// first start and kept in the data directory, so a restarted etcd advertises
// the same peer URL its member record holds.
type etcdPorts struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// startEtcd starts a single-member etcd with its data under dir and returns it
// once it serves clients.
func startEtcd(ctx context.Context, dir, logFile string) (*embed.Etcd, string, error) {
	ports, err := loadOrPickEtcdPorts(filepath.Join(dir, "ports.json"))
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.Client))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.Peer))}

	cfg := embed.NewConfig()
	cfg.Name = "jobkeeper"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
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
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newEtcdLogger(newRotatingLog(logFile), zapcore.WarnLevel))
	// Compact history regularly, as kube-apiserver would ask a standalone etcd to.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
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
	return e, clientURL.String(), nil
}

// loadOrPickEtcdPorts reuses the ports recorded in path while they are free
// and picks new free loopback ports otherwise.
func loadOrPickEtcdPorts(path string) (etcdPorts, error) {
	var p etcdPorts
	if data, err := os.ReadFile(path); err == nil {
		if json.Unmarshal(data, &p) == nil && portFree(p.Client) && portFree(p.Peer) {
			return p, nil
		}
	}
	var err error
	if p.Client, err = freePort(); err != nil {
		return p, err
	}
	if p.Peer, err = freePort(); err != nil {
		return p, err
	}
	data, _ := json.Marshal(p)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return p, fmt.Errorf("creating etcd directory: %w", err)
	}
	return p, writeFileAtomic(path, data, 0o600)
}

func portFree(port int) bool {
	if port <= 0 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
