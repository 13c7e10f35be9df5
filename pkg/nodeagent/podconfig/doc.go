// Package podconfig owns a container's configuration as pure functions of
// the pod, the container, its image's config and the objects already
// resolved for it (ConfigMaps, Secrets, Services): what goes into a
// runtime.Spec, as the kubelet's kuberuntime composes it.
//
//   - the environment: env and envFrom with their references expanded
//     (env.go, expand.go), the Services' variables (serviceenv.go) and the
//     image's own (imageconfig.go: also its ENTRYPOINT, CMD, WORKDIR and
//     the pull decision);
//   - the pod's resolv.conf, hosts file, hostname and FQDN (dns.go,
//     imagespec.go, hostname.go);
//   - the user a container runs as, in image and host modes (imagespec.go,
//     hostuser.go);
//   - the decision, field by field, of what the node honours, refuses or
//     runs without enforcing (podfeatures.go: DecideFeatures, the table of
//     docs/node-agent.md).
//
// It may not talk to the apiserver, record events, read the agent's state
// or start anything (its one write is WriteFileAtomic, of a managed file it
// composed): what it needs is passed in (SourceLookup for the
// objects an environment names), and what it decides is returned. It
// imports no other package of the node agent but runtime, for the types of
// a Spec.
package podconfig
