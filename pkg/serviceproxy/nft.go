package serviceproxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

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

// masqueradeMark is the packet mark bit (kube-proxy's, 0x4000) that the
// first packet of a connection to a node port is given, for postrouting
// to masquerade it (clearing the bit), as kube-proxy masquerades a
// Cluster external policy's traffic: a client on the bridge would
// otherwise get the endpoint's replies straight from it, not through the
// node that is to undo the DNAT (unless the bridge passes them to
// netfilter, br_netfilter).
const masqueradeMark uint32 = 0x4000

// Apply makes the table Table in the network namespace ns hold rules, in
// one transaction:
//
//	prerouting, output (nat, dstnat): jump services
//	services: one rule per Rule with endpoints: daddr, protocol, dport -> jump svc-N
//	          last: daddr local and not 127.0.0.0/8 -> jump nodeports
//	nodeports: one rule per Rule with endpoints and a NodePort: protocol,
//	           dport NodePort -> mark |= 0x4000, jump svc-N
//	svc-N: with affinity, first: saddr in affinity set i -> dnat to endpoint i
//	       then endpoint i of n taken with probability 1/(n-i): (saddr into
//	       affinity set i,) dnat to it
//	postrouting (nat, srcnat): mark & 0x4000 -> clear it, masquerade
//	                           saddr and daddr the same endpoint -> masquerade
//	input, forward, output (filter): new connections -> jump no-endpoints
//	no-endpoints: one rule per Rule without: daddr, protocol, dport -> reject
//	              and, with a NodePort, daddr local and not 127.0.0.0/8,
//	              protocol, dport NodePort -> reject
//
// Node ports are looked at after every cluster IP, so that a connection
// to a cluster IP costs no route lookup; they are matched on any of the
// node's addresses but the loopback ones (as kube-proxy's nftables mode:
// a connection from 127.0.0.1 cannot be sent to a pod). A node port
// without endpoints is refused in input, where what is addressed to the
// node goes, and in output (the node's own connections).
//
// Every rule is replaced; chains and affinity sets no longer wanted are
// deleted. The affinity sets still wanted are kept with their clients, so
// that a change to other Services (or to this one's endpoints) does not
// move a client whose endpoint is still there.
func Apply(ns netns.NsHandle, rules []Rule) error {
	// The whole table goes in one batch, acknowledged message by message:
	// the socket's buffers are sized to it (forced, as nft does, as root),
	// or a few dozen Services would not fit.
	// Each request opens a socket of its own, with the size as it is
	// then: the batch's is known once the table was read.
	size := socketBuffer(rules, 0)
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)), nftables.WithSockOptions(func(conn *mdnetlink.Conn) error {
		raw, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = sizeBuffers(int(fd), size) }); err != nil {
			return err
		}
		return serr
	}))
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4}
	oldChains, oldSets, err := contents(c, t)
	if err != nil {
		return fmt.Errorf("reading the table %s: %w", Table, err)
	}
	size = socketBuffer(rules, len(oldChains)+len(oldSets))
	// Every rule goes first, which releases the chains and sets they
	// named; what is still wanted is added again (a no-op for what is
	// there), what is not is deleted last.
	c.AddTable(t)
	c.FlushTable(t)
	chains, sets := map[string]bool{}, map[string]bool{}
	base := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		chains[name] = true
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio})
	}
	regular := func(name string) *nftables.Chain {
		chains[name] = true
		return c.AddChain(&nftables.Chain{Name: name, Table: t})
	}
	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	services, nodePorts, refuse := regular("services"), regular("nodeports"), regular("no-endpoints")
	for _, b := range []*nftables.Chain{
		base("prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest),
		base("output", nftables.ChainTypeNAT, nftables.ChainHookOutput, nftables.ChainPriorityNATDest),
	} {
		add(b, jump(services.Name))
	}
	for _, b := range []*nftables.Chain{
		base("filter-input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter),
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
	post := base("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	// Connections to node ports, marked in nodeports, first: the mark is
	// cleared as they are masqueraded.
	add(post, masqueradeMarked()...)
	// A pod that reached itself through a Service would get its own
	// packets with its own address as the source, which it drops: they
	// are masqueraded, found by source and destination being the same
	// endpoint once the destination was changed.
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
			if r.NodePort != 0 {
				add(refuse, slices.Concat(localDest(), nodePortMatch(r), []expr.Any{reject})...)
			}
			continue
		}
		svc := regular(fmt.Sprintf("svc-%d", i))
		add(services, append(match(r), jump(svc.Name))...)
		if r.NodePort != 0 {
			add(nodePorts, slices.Concat(nodePortMatch(r), markForMasquerade(), []expr.Any{jump(svc.Name)})...)
		}
		n := len(r.Endpoints)
		affinity := make([]*nftables.Set, n)
		if r.Affinity > 0 {
			for j, ep := range r.Endpoints {
				set := &nftables.Set{Table: t, Name: affinitySet(r, ep), KeyType: nftables.TypeIPAddr,
					HasTimeout: true, Dynamic: true, Timeout: r.Affinity}
				if err := c.AddSet(set, nil); err != nil {
					return err
				}
				sets[set.Name] = true
				affinity[j] = set
				// A client this endpoint served within the timeout goes
				// back to it.
				add(svc, append([]expr.Any{sourceAddr(),
					&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
					remember(set, r.Affinity)}, nftrules.DNAT(ep)...)...)
			}
		}
		for j, ep := range r.Endpoints {
			var exprs []expr.Any
			if j < n-1 {
				exprs = append(exprs,
					&expr.Numgen{Register: 1, Modulus: uint32(n - j), Type: unix.NFT_NG_RANDOM},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftrules.Native(0)})
			}
			if set := affinity[j]; set != nil {
				exprs = append(exprs, sourceAddr(), remember(set, r.Affinity))
			}
			add(svc, append(exprs, nftrules.DNAT(ep)...)...)
		}
	}
	add(services, append(localDest(), jump(nodePorts.Name))...)
	for _, ch := range oldChains {
		if !chains[ch.Name] {
			c.DelChain(ch)
		}
	}
	for _, set := range oldSets {
		if !sets[set.Name] {
			c.DelSet(set)
		}
	}
	return c.Flush()
}

// contents lists the chains and sets of the table t, none when it is not
// there.
func contents(c *nftables.Conn, t *nftables.Table) ([]*nftables.Chain, []*nftables.Set, error) {
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return nil, nil, err
	}
	if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == t.Name }) {
		return nil, nil, nil
	}
	all, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return nil, nil, err
	}
	chains := slices.DeleteFunc(all, func(ch *nftables.Chain) bool { return ch.Table == nil || ch.Table.Name != t.Name })
	sets, err := c.GetSets(t)
	if err != nil {
		return nil, nil, err
	}
	return chains, sets, nil
}

// affinitySet names the set of the clients endpoint ep of r served: the
// same name for as long as the Service port, the endpoint and the timeout
// are the same (a set's timeout cannot change in place).
func affinitySet(r Rule, ep netip.AddrPort) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%s>%s/%d", r.Address, r.Protocol, ep, r.Affinity.Milliseconds()))
	return "affinity-" + hex.EncodeToString(h[:8])
}

// sourceAddr is "ip saddr" into register 1.
func sourceAddr() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

// remember is "update @set { ip saddr timeout d }", register 1 holding
// the source address.
func remember(set *nftables.Set, d time.Duration) expr.Any {
	return &expr.Dynset{SrcRegKey: 1, SetName: set.Name, SetID: set.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: d}
}

// Remove deletes the table Table from the network namespace ns, if it is
// there.
func Remove(ns netns.NsHandle) error { return nftrules.DeleteTable(ns, Table) }

// socketBuffer is the netlink socket buffer a batch of rules needs, with
// deletions of the old table's chains and sets: about 1 KB a message
// with its acknowledgement, at least 1 MB.
func socketBuffer(rules []Rule, deletions int) int {
	messages := 24 + deletions
	hairpins := map[netip.Addr]bool{}
	for _, r := range rules {
		for _, ep := range r.Endpoints {
			if !hairpins[ep.Addr()] {
				hairpins[ep.Addr()] = true
				messages++ // its hairpin rule
			}
		}
		messages += 3 + len(r.Endpoints)
		if r.Affinity > 0 {
			messages += 2 * len(r.Endpoints) // a set and a rule each
		}
		if r.NodePort != 0 {
			messages++ // its rule in nodeports or no-endpoints
		}
	}
	return max(1<<20, messages*1024)
}

// match is "ip daddr <address> <protocol> dport <port>".
func match(r Rule) []expr.Any {
	return append(nftrules.DestAddr(r.Address.Addr()), nftrules.DestPort(r.Protocol == corev1.ProtocolUDP, r.Address.Port())...)
}

// nodePortMatch is "<protocol> dport <node port>".
func nodePortMatch(r Rule) []expr.Any {
	return nftrules.DestPort(r.Protocol == corev1.ProtocolUDP, r.NodePort)
}

// localDest is "ip daddr != 127.0.0.0/8 fib daddr type local": an
// address of the node's, the loopback ones aside.
func localDest() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127}},
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftrules.Native(unix.RTN_LOCAL)},
	}
}

// markForMasquerade is "meta mark set meta mark | masqueradeMark".
func markForMasquerade() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nftrules.Native(^masqueradeMark), Xor: nftrules.Native(masqueradeMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// masqueradeMarked is "meta mark & masqueradeMark != 0 meta mark set meta
// mark & ~masqueradeMark masquerade".
func masqueradeMarked() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nftrules.Native(masqueradeMark), Xor: nftrules.Native(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nftrules.Native(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: nftrules.Native(^masqueradeMark), Xor: nftrules.Native(0)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		&expr.Masq{},
	}
}

// jump is a verdict jumping to chain.
func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

// sizeBuffers sets the socket fd's send and receive buffers to size,
// forced past net.core.wmem_max and rmem_max as root. Forcing needs
// CAP_NET_ADMIN in the host's user namespace: without it (the rootless
// node's up holds it in its own only) the buffers are set as large as
// those limits allow, and a table too large for them fails with ENOBUFS,
// retried as any failed write.
func sizeBuffers(fd, size int) error {
	err := errors.Join(unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size),
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size))
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	return errors.Join(unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, size),
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size))
}
