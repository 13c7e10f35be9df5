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
// what it sends to a redirect's From goes to its To.
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
