// Package clusterdns is the cluster's DNS server: it answers for the
// Services, EndpointSlices and pods of the cluster as the Kubernetes
// DNS-Based Service Discovery specification (schema 1.1.0) says, and
// forwards every other question to the host's resolvers.
//
// Within the cluster zone (cluster.local by default):
//   - dns-version.<zone> TXT "1.1.0";
//   - <svc>.<ns>.svc.<zone> A/AAAA: a ClusterIP Service's cluster IPs; a
//     headless Service's ready endpoints (NXDOMAIN while it has none); an
//     ExternalName Service's CNAME (followed when the target is outside the
//     zone);
//   - <hostname>.<svc>.<ns>.svc.<zone> A/AAAA: a headless Service's ready
//     endpoint, by its hostname (a pod's spec.hostname when its
//     spec.subdomain names the Service) or, without one, its address with
//     dashes (10-1-2-3);
//   - _<port>._<proto>.<svc>.<ns>.svc.<zone> SRV for each named port: to the
//     Service, or to each ready endpoint of a headless one, the targets'
//     addresses in the additional section;
//   - PTR in in-addr.arpa and ip6.arpa for cluster IPs and headless
//     endpoints;
//   - <a>-<b>-<c>-<d>.<ns>.pod.<zone> A (the specification's deprecated
//     pod records, answered for any address as CoreDNS's "pods insecure").
//
// A name in the zone that does not exist is NXDOMAIN, one that exists
// without the type asked NODATA, both with the zone's SOA. Endpoints are
// ready as their EndpointSlice condition says (a Service with
// publishNotReadyAddresses has every endpoint ready: the EndpointSlice
// controller sees to it). Names compare case-insensitively.
//
// The answers are computed from shared informers' caches (indexed by
// cluster IP, by Service and by address), so the server holds no copy of
// its own and is exact as soon as the caches are.
package clusterdns
