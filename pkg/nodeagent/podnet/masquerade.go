package podnet

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"

	"jobkeeper.dev/jobkeeper/internal/nftrules"
)

// Table is the nftables table of jobkeeper's rules in the node's namespace.
const Table = "jobkeeper"

// Redirect sends TCP connections (UDP datagrams with UDP) to From (a
// Service's address) to To, an address of the node's.
type Redirect struct {
	From, To netip.AddrPort
	UDP      bool
}

// setUpMasquerade (re)creates the table Table with its rules: what a
// pod sends outside the pod CIDR leaves with the node's address, and
// what it sends to a redirect's From goes to its To; what the node sends
// from a loopback address to a pod (a host port on 127.0.0.1) leaves with
// the node's address, and nothing from outside reaches the loopback.
func setUpMasquerade(ns netns.NsHandle, cidr netip.Prefix, redirects []Redirect) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4}
	// Add then delete then add: the table is new whatever a previous run
	// left (deleting one that does not exist would fail the batch).
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	chain := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	network := cidr.Masked().Addr().AsSlice()
	mask := prefixMask(cidr)
	// A node's connection from a loopback address to a pod's host port
	// on 127.0.0.1 (routed to the bridge thanks to routeLocalnet) leaves
	// with the node's address, as the CNI portmap plugin masquerades it:
	// "ip saddr 127.0.0.0/8 oif != lo masquerade".
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127}},
		&expr.Meta{Key: expr.MetaKeyOIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nftrules.Native(loopbackIndex)},
		&expr.Masq{},
	}})
	// routeLocalnet lets the kernel route loopback addresses on the
	// bridge; nothing arriving from outside the node may reach its
	// loopback that way (CVE-2020-8558, which kube-proxy closes the same
	// way): "iif != lo ip daddr 127.0.0.0/8 drop", before routing.
	guard := c.AddChain(&nftables.Chain{
		Name: "loopback-guard", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw,
	})
	c.AddRule(&nftables.Rule{Table: table, Chain: guard, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nftrules.Native(loopbackIndex)},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127}},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		// ip saddr within the CIDR
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network},
		// ip daddr outside it
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: network},
		&expr.Masq{},
	}})
	if len(redirects) > 0 {
		// From pods (prerouting) and from the node itself: its
		// hostNetwork pods are given the same Service addresses.
		for _, hook := range []struct {
			name string
			hook *nftables.ChainHook
		}{{"prerouting", nftables.ChainHookPrerouting}, {"output", nftables.ChainHookOutput}} {
			ch := c.AddChain(&nftables.Chain{
				Name: hook.name, Table: table, Type: nftables.ChainTypeNAT,
				Hooknum: hook.hook, Priority: nftables.ChainPriorityNATDest,
			})
			for _, r := range redirects {
				c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: redirectRule(r)})
			}
		}
	}
	return c.Flush()
}

// loopbackIndex is the interface index of lo, the same in every network
// namespace.
const loopbackIndex = 1

// tearDownMasquerade deletes the table Table, if it exists.
func tearDownMasquerade(ns netns.NsHandle) error { return nftrules.DeleteTable(ns, Table) }

// redirectRule is "ip daddr From.Addr tcp dport From.Port dnat to To"
// (udp with UDP).
func redirectRule(r Redirect) []expr.Any {
	exprs := append(nftrules.DestAddr(r.From.Addr()), nftrules.DestPort(r.UDP, r.From.Port())...)
	return append(exprs, nftrules.DNAT(r.To)...)
}

// prefixMask is cidr's IPv4 netmask.
func prefixMask(cidr netip.Prefix) []byte {
	m := make([]byte, 4)
	for i := range cidr.Bits() {
		m[i/8] |= 1 << (7 - i%8)
	}
	return m
}
