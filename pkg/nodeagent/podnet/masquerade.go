package podnet

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
)

// natTable is jobkeeper's nftables table in the node's namespace.
const natTable = "jobkeeper"

// setUpMasquerade (re)creates the table natTable with one rule: what a
// pod sends outside the pod CIDR leaves with the node's address.
func setUpMasquerade(ns netns.NsHandle, cidr netip.Prefix) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: natTable, Family: nftables.TableFamilyIPv4}
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
	return c.Flush()
}

// tearDownMasquerade deletes the table natTable, if it exists.
func tearDownMasquerade(ns netns.NsHandle) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if t.Name == natTable {
			c.DelTable(t)
			return c.Flush()
		}
	}
	return nil
}

// prefixMask is cidr's IPv4 netmask.
func prefixMask(cidr netip.Prefix) []byte {
	m := make([]byte, 4)
	for i := range cidr.Bits() {
		m[i/8] |= 1 << (7 - i%8)
	}
	return m
}
