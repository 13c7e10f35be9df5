package podnet

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestIPAM(t *testing.T) {
	a := ipam{dir: filepath.Join(t.TempDir(), "ipam"), prefix: netip.MustParsePrefix("10.9.0.0/29")}
	var got []string
	for _, uid := range []string{"a", "b", "c", "d", "e"} {
		ip, err := a.allocate(uid)
		if err != nil {
			t.Fatalf("allocate(%s): %v", uid, err)
		}
		got = append(got, ip.String())
	}
	// .0 is the network, .1 the gateway, .7 the broadcast.
	if want := []string{"10.9.0.2", "10.9.0.3", "10.9.0.4", "10.9.0.5", "10.9.0.6"}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if _, err := a.allocate("f"); err == nil || !strings.Contains(err.Error(), "no free address") {
		t.Errorf("allocating past the end: %v", err)
	}
	// A pod keeps its address.
	if ip, err := a.allocate("c"); err != nil || ip.String() != "10.9.0.4" {
		t.Errorf("allocate(c) again = %v, %v; want 10.9.0.4", ip, err)
	}
	if err := a.release("c"); err != nil {
		t.Fatal(err)
	}
	if err := a.release("c"); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
	if ip, err := a.allocate("f"); err != nil || ip.String() != "10.9.0.4" {
		t.Errorf("allocate(f) after c left = %v, %v; want 10.9.0.4", ip, err)
	}
	holders, err := a.holders()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(holders)
	if want := []string{"a", "b", "d", "e", "f"}; !slices.Equal(holders, want) {
		t.Errorf("holders %v, want %v", holders, want)
	}
	// A restarted agent reads the same records.
	b := ipam{dir: a.dir, prefix: a.prefix}
	if ip, ok, err := b.lookup("e"); err != nil || !ok || ip.String() != "10.9.0.6" {
		t.Errorf("lookup(e) = %v %v %v", ip, ok, err)
	}
	for _, bad := range []string{"", "x/y", "a\nb", " a", "a\r"} {
		if _, err := a.allocate(bad); err == nil {
			t.Errorf("allocate(%q) succeeded", bad)
		}
	}
	// Files that are not allocations are ignored.
	if err := os.WriteFile(filepath.Join(a.dir, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "10.1.1.1"), []byte("other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if holders, err := a.holders(); err != nil || len(holders) != 5 {
		t.Errorf("holders with foreign files and an address outside the range: %v, %v", holders, err)
	}
}

func TestLastAddrAndGateway(t *testing.T) {
	p := netip.MustParsePrefix("10.244.0.0/24")
	if got := lastAddr(p).String(); got != "10.244.0.255" {
		t.Errorf("lastAddr = %s", got)
	}
	if got := gateway(p).String(); got != "10.244.0.1" {
		t.Errorf("gateway = %s", got)
	}
	if got := hostVeth("0b8f3c1e-7a0d-4a36-9a57-1f2f3e4d5c6b"); len(got) > 15 || !strings.HasPrefix(got, "jkv") {
		t.Errorf("hostVeth = %q", got)
	}
}
