package podnet

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// ipam hands out the addresses of a pod CIDR, one per pod, as host-local
// IPAM does: a file per address in dir, named by the address and holding
// the pod's UID, created exclusively. The network address, the gateway
// (the first address) and, in IPv4, the broadcast address are never
// handed out. Not safe for concurrent use.
type ipam struct {
	dir    string
	prefix netip.Prefix
}

// gateway is prefix's first address, the bridge's.
func gateway(prefix netip.Prefix) netip.Addr { return prefix.Masked().Addr().Next() }

// lookup returns the address recorded for uid, if any.
func (a ipam) lookup(uid string) (netip.Addr, bool, error) {
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return netip.Addr{}, false, nil
		}
		return netip.Addr{}, false, err
	}
	for _, e := range entries {
		ip, err := netip.ParseAddr(e.Name())
		if err != nil || !a.prefix.Contains(ip) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(a.dir, e.Name()))
		if err == nil && strings.TrimSpace(string(b)) == uid {
			return ip, true, nil
		}
	}
	return netip.Addr{}, false, nil
}

// allocate returns uid's address: the recorded one, or the lowest free one,
// recorded now.
func (a ipam) allocate(uid string) (netip.Addr, error) {
	if uid == "" || strings.ContainsAny(uid, "/") || strings.TrimSpace(uid) != uid || strings.ContainsAny(uid, "\n\r") {
		return netip.Addr{}, fmt.Errorf("pod UID %q", uid)
	}
	if ip, ok, err := a.lookup(uid); err != nil || ok {
		return ip, err
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return netip.Addr{}, err
	}
	last := lastAddr(a.prefix)
	for ip := gateway(a.prefix).Next(); ip.IsValid() && a.prefix.Contains(ip); ip = ip.Next() {
		if ip.Is4() && ip == last {
			break
		}
		f, err := os.OpenFile(filepath.Join(a.dir, ip.String()), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return netip.Addr{}, err
		}
		_, werr := f.WriteString(uid + "\n")
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			_ = os.Remove(f.Name())
			return netip.Addr{}, fmt.Errorf("recording %s for pod %s: %w", ip, uid, err)
		}
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("no free address left in the pod CIDR %s", a.prefix)
}

// release frees uid's address, if it has one.
func (a ipam) release(uid string) error {
	ip, ok, err := a.lookup(uid)
	if err != nil || !ok {
		return err
	}
	if err := os.Remove(filepath.Join(a.dir, ip.String())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// holders returns the pod UIDs holding an address.
func (a ipam) holders() ([]string, error) {
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if ip, err := netip.ParseAddr(e.Name()); err != nil || !a.prefix.Contains(ip) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(a.dir, e.Name())); err == nil {
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	return out, nil
}

// lastAddr is prefix's last address (IPv4's broadcast).
func lastAddr(prefix netip.Prefix) netip.Addr {
	b := prefix.Masked().Addr().AsSlice()
	for i := prefix.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	ip, _ := netip.AddrFromSlice(b)
	return ip
}
