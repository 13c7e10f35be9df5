// Package nftrules holds the nf_tables expressions and table handling that
// the node's network tables share (podnet's masquerade and host ports,
// serviceproxy's Services): matching a destination, NAT to an address and
// port, and deleting a table, over google/nftables.
package nftrules

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Port is a port in network byte order.
func Port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// Native is a 32-bit register value (a mark, an address type, numgen's
// output) in the host's byte order, as the kernel keeps them.
func Native(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// DestAddr is "ip daddr addr".
func DestAddr(addr netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr.AsSlice()},
	}
}

// DestPort is "<tcp|udp> dport port".
func DestPort(udp bool, port uint16) []expr.Any {
	proto := byte(unix.IPPROTO_TCP)
	if udp {
		proto = unix.IPPROTO_UDP
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: Port(port)},
	}
}

// DNAT is "dnat to to".
func DNAT(to netip.AddrPort) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: Port(to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

// Hairpin is "ip saddr ip ip daddr ip masquerade": a pod whose connection
// was sent back to itself gets it from the node's address, or it would
// drop its own packets.
func Hairpin(ip netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.AsSlice()},
		&expr.Masq{},
	}
}

// DeleteTable deletes the IPv4 table name from the network namespace ns,
// if it is there.
func DeleteTable(ns netns.NsHandle, name string) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if t.Name == name {
			c.DelTable(t)
			return c.Flush()
		}
	}
	return nil
}
