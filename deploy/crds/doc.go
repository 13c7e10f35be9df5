// Package crds embeds jobkeeper's CustomResourceDefinition manifests (the YAML
// files next to it, which are also what real clusters apply with kubectl) and
// installs them into a cluster.
package crds
