package serviceproxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/vishvananda/netns"
)

// Table is the nftables table of the Services' rules in the node's
// network namespace.
const Table = "jobkeeper-services"

// Apply replaces the table Table in the network namespace ns with rules,
// in one transaction:
//
//	prerouting, output (nat, dstnat): jump services
//	services: one rule per Rule with endpoints: daddr, protocol, dport -> jump svc-N
//	svc-N: endpoint i of n taken with probability 1/(n-i) -> jump ep-N-i
//	ep-N-i: dnat to the endpoint
//	postrouting (nat, srcnat): saddr and daddr the same endpoint -> masquerade
//	forward, output (filter): jump no-endpoints
//	no-endpoints: one rule per Rule without: daddr, protocol, dport -> reject
func Apply(ns netns.NsHandle, rules []Rule) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4}
	// Added, deleted and added again: the table is new whatever was
	// there, in the same transaction as its rules.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio})
	}
	regular := func(name string) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t})
	}
	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	services, refuse := regular("services"), regular("no-endpoints")
	for _, b := range []*nftables.Chain{
		base("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest),
		base("output", nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest),
	} {
		add(b, jump(services.Name))
	}
	for _, b := range []*nftables.Chain{
		base("filter-forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter),
		base("filter-output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter),
	} {
		add(b, jump(refuse.Name))
	}
	// A pod that reached itself through a Service would get its own
	// packets with its own address as the source, which it drops: they
	// are masqueraded, found by source and destination being the same
	// endpoint once the destination was changed.
	post := base("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	hairpins := map[netip.Addr]bool{}
	for _, r := range rules {
		for _, ep := range r.Endpoints {
			if hairpins[ep.Addr()] {
				continue
			}
			hairpins[ep.Addr()] = true
			add(post,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ep.Addr().AsSlice()},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ep.Addr().AsSlice()},
				&expr.Masq{},
			)
		}
	}
	for i, r := range rules {
		if len(r.Endpoints) == 0 {
			reject := &expr.Reject{Type: unix.NFT_REJECT_TCP_RST}
			if r.Protocol == corev1.ProtocolUDP {
				reject = &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3} // port unreachable
			}
			add(refuse, append(match(r), reject)...)
			continue
		}
		svc := regular(fmt.Sprintf("svc-%d", i))
		add(services, append(match(r), jump(svc.Name))...)
		n := len(r.Endpoints)
		for j, ep := range r.Endpoints {
			ch := regular(fmt.Sprintf("ep-%d-%d", i, j))
			if j < n-1 {
				add(svc,
					&expr.Numgen{Register: 1, Modulus: uint32(n - j), Type: unix.NFT_NG_RANDOM},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: native(0)},
					jump(ch.Name))
			} else {
				add(svc, jump(ch.Name))
			}
			add(ch,
				&expr.Immediate{Register: 1, Data: ep.Addr().AsSlice()},
				&expr.Immediate{Register: 2, Data: port(ep.Port())},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
			)
		}
	}
	return c.Flush()
}

// Remove deletes the table Table from the network namespace ns, if it is
// there.
func Remove(ns netns.NsHandle) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if t.Name == Table {
			c.DelTable(t)
			return c.Flush()
		}
	}
	return nil
}

// match is "ip daddr <address> <protocol> dport <port>".
func match(r Rule) []expr.Any {
	proto := byte(unix.IPPROTO_TCP)
	if r.Protocol == corev1.ProtocolUDP {
		proto = unix.IPPROTO_UDP
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: r.Address.Addr().AsSlice()},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port(r.Address.Port())},
	}
}

// jump is a verdict jumping to chain.
func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

// port is a port in network byte order.
func port(p uint16) []byte { return binary.BigEndian.AppendUint16(nil, p) }

// native is a 32-bit register value (a mark, numgen's output) in the
// host's byte order, as the kernel keeps them.
func native(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
