package podconfig

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
)

// HostResolvConf is the host's resolver configuration, which pods start
// from (they share the host's network).
const HostResolvConf = "/etc/resolv.conf"

// clusterDomain is the cluster's DNS domain, as in the Services' names the
// agent writes (/etc/hosts).
const clusterDomain = "cluster.local"

// The limits of a pod's DNS configuration (the API's validation limits,
// which the kubelet applies to what it composes).
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	// maxDNSSearchLen is the longest search domain kept (longer ones make
	// some resolvers abort).
	maxDNSSearchLen = 253
)

// DNSConfig is a resolv.conf's content.
type DNSConfig struct {
	// servers, searches and options are its nameserver, search and
	// options entries.
	servers, searches, options []string
}

// ParseResolvConf reads what the kubelet takes from the host's resolv.conf:
// every nameserver, the last search line (without "." and trailing dots)
// and the options (a later option replaces an earlier one of the same
// name). Other lines are dropped.
func ParseResolvConf(data []byte) DNSConfig {
	var c DNSConfig
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) >= 2 {
				c.servers = append(c.servers, f[1])
			}
		case "search":
			c.searches = nil
			for _, s := range f[1:] {
				if s != "." {
					c.searches = append(c.searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			c.options = mergeOptions(c.options, f[1:])
		}
	}
	return c
}

// mergeOptions returns options with more added, an option of more
// replacing the one of the same name ("ndots:5" replaces "ndots:1"), in
// name order.
func mergeOptions(options, more []string) []string {
	byName := map[string]string{}
	for _, o := range append(append([]string(nil), options...), more...) {
		name, _, _ := strings.Cut(o, ":")
		byName[name] = o
	}
	out := make([]string, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, byName[name])
	}
	return out
}

// PodDNS composes a pod's DNS configuration from the host's as the kubelet
// does on a node without cluster DNS: dnsPolicy None starts empty, every
// other policy starts from the host's (ClusterFirst falls back to Default,
// as the kubelet without a cluster DNS address), then dnsConfig adds its
// nameservers and searches (duplicates dropped) and its options (replacing
// those of the same name). The result is cut to the limits, each cut
// explained in a warning (the kubelet's DNSConfigForming events).
//
// With cluster DNS (clusterServers, the cluster DNS Service's address),
// a pod whose policy asks for it (ClusterFirstDNS) starts as the kubelet's
// do: those nameservers, the searches <namespace>.svc.<domain>,
// svc.<domain> and <domain> before the host's, and the option ndots:5.
func PodDNS(pod *corev1.Pod, host DNSConfig, clusterServers []string) (DNSConfig, []string) {
	c := host
	switch {
	case pod.Spec.DNSPolicy == corev1.DNSNone:
		c = DNSConfig{}
	case len(clusterServers) > 0 && ClusterFirstDNS(pod):
		c = DNSConfig{
			servers:  clusterServers,
			searches: withoutDuplicates(append([]string{pod.Namespace + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain}, host.searches...)),
			options:  []string{"ndots:5"},
		}
	}
	c = DNSConfig{servers: slices.Clone(c.servers), searches: slices.Clone(c.searches), options: slices.Clone(c.options)}
	if dc := pod.Spec.DNSConfig; dc != nil {
		c.servers = withoutDuplicates(append(c.servers, dc.Nameservers...))
		c.searches = withoutDuplicates(append(c.searches, dc.Searches...))
		var more []string
		for _, o := range dc.Options {
			if o.Value != nil && *o.Value != "" {
				more = append(more, o.Name+":"+*o.Value)
			} else {
				more = append(more, o.Name)
			}
		}
		c.options = mergeOptions(c.options, more)
	}
	var warnings []string
	if len(c.servers) > maxDNSNameservers {
		c.servers = c.servers[:maxDNSNameservers]
		warnings = append(warnings, "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: "+strings.Join(c.servers, " "))
	}
	cut := false
	if len(c.searches) > maxDNSSearchPaths {
		c.searches, cut = c.searches[:maxDNSSearchPaths], true
	}
	kept := c.searches[:0]
	for _, s := range c.searches {
		if len(s) > maxDNSSearchLen {
			cut = true
			continue
		}
		kept = append(kept, s)
	}
	c.searches = kept
	for len(strings.Join(c.searches, " ")) > maxDNSSearchListChars {
		c.searches, cut = c.searches[:len(c.searches)-1], true
	}
	if cut {
		warnings = append(warnings, "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: "+strings.Join(c.searches, " "))
	}
	return c, warnings
}

// checkDNSConfig returns why dc cannot be written into a resolv.conf, naming
// the field, or "" when it can. resolv.conf separates entries by blanks and
// lines, so a nameserver, search domain, option name or option value with
// whitespace or a control character would add entries (a newline adds whole
// lines) the kubelet's merge never composed. The apiserver rejects such
// nameservers (IP addresses) and searches (DNS subdomains) but checks only
// that an option has a name; all are checked here all the same.
func checkDNSConfig(dc *corev1.PodDNSConfig) string {
	if dc == nil {
		return ""
	}
	bad := func(field, v string) string {
		return fmt.Sprintf("spec.dnsConfig.%s: %q has whitespace or a control character, which cannot be written into the pod's /etc/resolv.conf as one entry", field, v)
	}
	for i, ns := range dc.Nameservers {
		if !resolvConfWord(ns) {
			return bad(fmt.Sprintf("nameservers[%d]", i), ns)
		}
	}
	for i, s := range dc.Searches {
		if !resolvConfWord(s) {
			return bad(fmt.Sprintf("searches[%d]", i), s)
		}
	}
	for i, o := range dc.Options {
		if !resolvConfWord(o.Name) {
			return bad(fmt.Sprintf("options[%d].name", i), o.Name)
		}
		if o.Value != nil && *o.Value != "" && !resolvConfWord(*o.Value) {
			return bad(fmt.Sprintf("options[%d].value", i), *o.Value)
		}
	}
	return ""
}

// resolvConfWord reports whether s is free of whitespace and control
// characters, so that it stays one word of a resolv.conf line.
func resolvConfWord(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// withoutDuplicates keeps the first of each value, in order.
func withoutDuplicates(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// ResolvConf renders c as container runtimes write it.
func (c DNSConfig) ResolvConf() []byte {
	var b strings.Builder
	if len(c.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(c.searches, " "))
	}
	for _, s := range c.servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(c.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(c.options, " "))
	}
	return []byte(b.String())
}

// ClusterFirstDNS reports whether a pod's dnsPolicy asks for the cluster's
// DNS: ClusterFirst (the default) without hostNetwork, or
// ClusterFirstWithHostNet.
func ClusterFirstDNS(pod *corev1.Pod) bool {
	switch pod.Spec.DNSPolicy {
	case corev1.DNSClusterFirstWithHostNet:
		return true
	case corev1.DNSClusterFirst, "":
		return !pod.Spec.HostNetwork
	}
	return false
}

// OwnDNS reports whether a pod's DNS differs from the host's (dnsPolicy
// None or a dnsConfig): in host mode only such a pod gets a resolv.conf of
// its own, the others read the host's.
func OwnDNS(pod *corev1.Pod) bool {
	return pod.Spec.DNSPolicy == corev1.DNSNone || pod.Spec.DNSConfig != nil
}

// maxFQDNLen is the longest hostname setHostnameAsFQDN may give.
const maxFQDNLen = 64

// PodUTSName is the name a pod's containers see as their hostname: its
// hostname (podHostname), or with setHostnameAsFQDN and a subdomain the
// fully qualified name, as the kubelet gives the pod's sandbox. A name too
// long is an error naming the field.
func PodUTSName(pod *corev1.Pod) (string, error) {
	hostname := PodHostname(pod)
	sub := podSubdomain(pod)
	if pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN || sub == "" {
		return hostname, nil
	}
	fqdn := fmt.Sprintf("%s.%s.%s.svc.%s", hostname, sub, pod.Namespace, clusterDomain)
	if len(fqdn) > maxFQDNLen {
		return "", &CreateError{Msg: fmt.Sprintf("setHostnameAsFQDN: failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDNLen, len(fqdn))}
	}
	return fqdn, nil
}
