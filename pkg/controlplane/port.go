package controlplane

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// portFileName is the file in the data directory that holds the port the
// apiserver last served on, so that Port 0 can keep it (kubeconfigs written
// earlier name it) and callers can say when it changed.
const portFileName = "apiserver-port"

// LastPort returns the port the apiserver of dataDir served on last, or 0
// when none is recorded (a new data directory, or one from an older
// jobkeeper) or the record is unreadable.
func LastPort(dataDir string) int {
	data, err := os.ReadFile(filepath.Join(dataDir, portFileName))
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || port < 1 || port > 65535 {
		return 0
	}
	return port
}

// recordPort writes port as the one dataDir's apiserver serves on.
func recordPort(dataDir string, port int) error {
	if err := writeFileAtomic(filepath.Join(dataDir, portFileName), []byte(strconv.Itoa(port)+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the apiserver's port: %w", err)
	}
	return nil
}

// portCandidates lists the ports to try, in order, for a requested port and
// the last one recorded: a requested port alone; for port 0, the last port
// first (it keeps earlier kubeconfigs working), then any free port (0).
func portCandidates(requested, last int) []int {
	if requested != 0 {
		return []int{requested}
	}
	if last != 0 {
		return []int{last, 0}
	}
	return []int{0}
}

// listenAPIServer listens on 127.0.0.1 at the first of the candidates that
// is free. Only a busy port moves on to the next; a busy last candidate is
// the error users see.
func listenAPIServer(candidates []int) (net.Listener, error) {
	var err error
	for i, port := range candidates {
		var l net.Listener
		l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listening on 127.0.0.1:%d: %w", port, err)
		}
		if i == len(candidates)-1 {
			return nil, fmt.Errorf("port %d on 127.0.0.1 is already in use (choose another with --port)", port)
		}
	}
	return nil, err
}
