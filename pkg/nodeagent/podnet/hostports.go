package podnet

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"jobkeeper.dev/jobkeeper/internal/nftrules"
)

// HostPortsTable is the nftables table of the pods' host ports in the
// node's namespace.
const HostPortsTable = "jobkeeper-hostports"

// PortMapping is one hostPort of a pod, as the CNI portmap plugin maps it:
// connections to HostPort on the node's addresses (HostIP alone when set)
// reach the pod's ContainerPort.
type PortMapping struct {
	HostIP        netip.Addr
	HostPort      uint16
	ContainerPort uint16
	UDP           bool
}

// MapPorts sets pod uid's host ports (none: it has none) and rewrites the
// table when they changed. The pod must have an address (Ensure).
func (p *Pods) MapPorts(uid string, ports []PortMapping) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hostPorts == nil {
		p.hostPorts = map[string][]PortMapping{}
	}
	if slices.Equal(p.hostPorts[uid], ports) && (len(ports) > 0 || p.portsWritten) {
		return nil
	}
	if len(ports) == 0 {
		delete(p.hostPorts, uid)
	} else {
		p.hostPorts[uid] = slices.Clone(ports)
	}
	return p.writeHostPorts()
}

// unmapPorts forgets pod uid's host ports; mu held.
func (p *Pods) unmapPorts(uid string) error {
	if _, ok := p.hostPorts[uid]; !ok {
		return nil
	}
	delete(p.hostPorts, uid)
	return p.writeHostPorts()
}

// writeHostPorts replaces the table with the host ports of every pod that
// has an address, in one transaction; mu held.
//
//	prerouting (nat, dstnat): daddr local (or HostIP), protocol, dport -> dnat to the pod
//	output (nat, dstnat): the same (127.0.0.1 included, which the node's
//	                      table routes and masquerades: routeLocalnet)
//	postrouting (nat, srcnat): a pod reaching its own host port -> masquerade
func (p *Pods) writeHostPorts() error {
	c, err := nftables.New(nftables.WithNetNSFd(int(p.node.ns)))
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: HostPortsTable, Family: nftables.TableFamilyIPv4}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	uids := make([]string, 0, len(p.hostPorts))
	for uid := range p.hostPorts {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	for _, uid := range uids {
		ip, ok, err := p.node.ipam.lookup(uid)
		if err != nil || !ok {
			continue
		}
		for _, m := range p.hostPorts[uid] {
			rule := hostPortRule(m, ip)
			c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: rule})
			c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: rule})
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: nftrules.Hairpin(ip)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("writing the pods' host ports: %w", err)
	}
	p.portsWritten = true
	return nil
}

// hostPortRule is "(fib daddr type local | ip daddr HostIP) <protocol>
// dport HostPort dnat to ip:ContainerPort".
func hostPortRule(m PortMapping, ip netip.Addr) []expr.Any {
	var exprs []expr.Any
	if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
		exprs = nftrules.DestAddr(m.HostIP)
	} else {
		exprs = []expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nftrules.Native(unix.RTN_LOCAL)},
		}
	}
	exprs = append(exprs, nftrules.DestPort(m.UDP, m.HostPort)...)
	return append(exprs, nftrules.DNAT(netip.AddrPortFrom(ip, m.ContainerPort))...)
}

// removeHostPorts deletes the table from ns, if it is there.
func removeHostPorts(ns netns.NsHandle) error { return nftrules.DeleteTable(ns, HostPortsTable) }
