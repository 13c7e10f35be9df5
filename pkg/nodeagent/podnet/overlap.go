package podnet

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// CheckRanges refuses address ranges (by what they are: "pod CIDR",
// "service CIDR") that overlap each other or a route of the network
// namespace ns other than the default route and those of bridge and of
// its service link (a previous run's): the node could then not tell pods
// from the networks it reaches. The error names both. netns.None() is the
// calling thread's own namespace, read without entering it (which needs
// CAP_SYS_ADMIN).
func CheckRanges(ns netns.NsHandle, bridge string, ranges map[string]netip.Prefix) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the node's network namespace: %w", err)
	}
	defer h.Close()
	own := map[int]bool{}
	for _, name := range []string{bridge, serviceLink(bridge)} {
		if l, err := h.LinkByName(name); err == nil {
			own[l.Attrs().Index] = true
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing the node's routes: %w", err)
	}
	var hostRoutes []routeInfo
	for _, r := range routes {
		if r.Dst == nil || own[r.LinkIndex] {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok || ones == 0 {
			continue
		}
		dev := fmt.Sprint(r.LinkIndex)
		if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
			dev = l.Attrs().Name
		}
		hostRoutes = append(hostRoutes, routeInfo{netip.PrefixFrom(ip.Unmap(), ones).Masked(), dev})
	}
	return checkRanges(ranges, hostRoutes)
}

// routeInfo is one route of the node's: its destination and device.
type routeInfo struct {
	dst netip.Prefix
	dev string
}

// checkRanges is CheckRanges' decision.
func checkRanges(ranges map[string]netip.Prefix, routes []routeInfo) error {
	names := make([]string, 0, len(ranges))
	for name := range ranges {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, a := range names {
		for _, b := range names[i+1:] {
			if ranges[a].Overlaps(ranges[b]) {
				return fmt.Errorf("the %s %s overlaps the %s %s", a, ranges[a], b, ranges[b])
			}
		}
		for _, r := range routes {
			if ranges[a].Overlaps(r.dst) {
				return fmt.Errorf("the %s %s overlaps the node's route to %s (dev %s): choose another range", a, ranges[a], r.dst, r.dev)
			}
		}
	}
	return nil
}
