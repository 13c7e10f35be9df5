package serviceproxy

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// clearStaleUDP deletes, in the network namespace ns, the conntrack entries
// of UDP flows to a Service's address whose endpoint the new rules no
// longer have, as kube-proxy does: a connected UDP socket's datagrams would
// otherwise keep going to a pod that is gone (or to the next pod given its
// address) until the entry times out.
func clearStaleUDP(ns netns.NsHandle, before, after []Rule) error {
	now := map[netip.AddrPort]map[netip.Addr]bool{}
	for _, r := range after {
		if r.Protocol != corev1.ProtocolUDP {
			continue
		}
		eps := map[netip.Addr]bool{}
		for _, ep := range r.Endpoints {
			eps[ep.Addr()] = true
		}
		now[r.Address] = eps
	}
	var stale [][2]netip.Addr
	for _, r := range before {
		if r.Protocol != corev1.ProtocolUDP {
			continue
		}
		for _, ep := range r.Endpoints {
			if !now[r.Address][ep.Addr()] {
				stale = append(stale, [2]netip.Addr{r.Address.Addr(), ep.Addr()})
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	var errs []error
	for _, s := range stale {
		f := &netlink.ConntrackFilter{}
		errs = append(errs,
			f.AddIP(netlink.ConntrackOrigDstIP, net.IP(s[0].AsSlice())),
			f.AddIP(netlink.ConntrackReplySrcIP, net.IP(s[1].AsSlice())),
			f.AddProtocol(unix.IPPROTO_UDP))
		if _, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
