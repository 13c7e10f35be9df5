package controlplane

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPortCandidates(t *testing.T) {
	cases := map[string]struct {
		requested, last int
		want            []int
	}{
		"requested, nothing recorded":  {requested: 6443, want: []int{6443}},
		"requested wins over the last": {requested: 6443, last: 40000, want: []int{6443}},
		"any port, nothing recorded":   {want: []int{0}},
		"any port keeps the last":      {last: 40000, want: []int{40000, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, portCandidates(tc.requested, tc.last)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLastPort(t *testing.T) {
	dir := t.TempDir()
	if got := LastPort(dir); got != 0 {
		t.Errorf("nothing recorded: %d, want 0", got)
	}
	if err := recordPort(dir, 40123); err != nil {
		t.Fatal(err)
	}
	if got := LastPort(dir); got != 40123 {
		t.Errorf("recorded 40123, read %d", got)
	}
	st, err := os.Stat(filepath.Join(dir, portFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("port file: %v, %v; want mode 0600", st, err)
	}
	for _, junk := range []string{"", "x", "0", "70000", "-1"} {
		if err := os.WriteFile(filepath.Join(dir, portFileName), []byte(junk), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := LastPort(dir); got != 0 {
			t.Errorf("record %q read as %d, want 0", junk, got)
		}
	}
}

func TestListenAPIServer(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	// A free last port is kept.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	l, err := listenAPIServer(portCandidates(0, freePort))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Addr().(*net.TCPAddr).Port; got != freePort {
		t.Errorf("free last port %d: listening on %d", freePort, got)
	}
	l.Close()

	// A busy last port gives way to any free one.
	l, err = listenAPIServer(portCandidates(0, busyPort))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Addr().(*net.TCPAddr).Port; got == busyPort || got == 0 {
		t.Errorf("busy last port %d: listening on %d", busyPort, got)
	}
	l.Close()

	// A busy requested port is an error naming it.
	if _, err := listenAPIServer(portCandidates(busyPort, 0)); err == nil || !strings.Contains(err.Error(), "port "+strconv.Itoa(busyPort)+" on 127.0.0.1 is already in use") {
		t.Errorf("busy requested port: err = %v", err)
	}
}
