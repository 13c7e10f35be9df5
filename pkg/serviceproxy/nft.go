package serviceproxy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/vishvananda/netns"

	"jobkeeper.dev/jobkeeper/internal/nftrules"
)

// Table is the nftables table of the Services' rules in the node's
// network namespace.
const Table = "jobkeeper-services"

// Apply replaces the table Table in the network namespace ns with rules,
// in one transaction:
//
//	prerouting, output (nat, dstnat): jump services
//	services: one rule per Rule with endpoints: daddr, protocol, dport -> jump svc-N
//	svc-N: endpoint i of n taken with probability 1/(n-i): dnat to it
//	postrouting (nat, srcnat): saddr and daddr the same endpoint -> masquerade
//	forward, output (filter): new connections -> jump no-endpoints
//	no-endpoints: one rule per Rule without: daddr, protocol, dport -> reject
func Apply(ns netns.NsHandle, rules []Rule) error {
	// The whole table goes in one batch, acknowledged message by message:
	// the socket's buffers are sized to it (forced, as nft does, as root),
	// or a few dozen Services would not fit.
	size := socketBuffer(rules)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)), nftables.WithSockOptions(func(conn *mdnetlink.Conn) error {
		raw, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size))
		}); err != nil {
			return err
		}
		return serr
	}))
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
		// Only a connection's first packet: the rest of an established
		// one never needs refusing.
		add(b,
			&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nftrules.Native(expr.CtStateBitNEW), Xor: nftrules.Native(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nftrules.Native(0)},
			jump(refuse.Name))
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
			add(post, nftrules.Hairpin(ep.Addr())...)
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
			var exprs []expr.Any
			if j < n-1 {
				exprs = append(exprs,
					&expr.Numgen{Register: 1, Modulus: uint32(n - j), Type: unix.NFT_NG_RANDOM},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftrules.Native(0)})
			}
			add(svc, append(exprs, nftrules.DNAT(ep)...)...)
		}
	}
	return c.Flush()
}

// Remove deletes the table Table from the network namespace ns, if it is
// there.
func Remove(ns netns.NsHandle) error { return nftrules.DeleteTable(ns, Table) }

// socketBuffer is the netlink socket buffer a batch of rules needs: about
// 1 KB a message with its acknowledgement, at least 1 MB.
func socketBuffer(rules []Rule) int {
	messages := 16
	for _, r := range rules {
		messages += 3 + len(r.Endpoints)
	}
	return max(1<<20, messages*1024)
}

// match is "ip daddr <address> <protocol> dport <port>".
func match(r Rule) []expr.Any {
	return append(nftrules.DestAddr(r.Address.Addr()), nftrules.DestPort(r.Protocol == corev1.ProtocolUDP, r.Address.Port())...)
}

// jump is a verdict jumping to chain.
func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }
