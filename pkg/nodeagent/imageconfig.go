package nodeagent

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// defaultPath is the PATH of a container whose image and spec set none, as
// containerd's CRI plugin gives it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageDefaults is what an image's config contributes to a container that
// runs it.
type imageDefaults struct {
	// entrypoint and cmd are the image's ENTRYPOINT and CMD.
	entrypoint, cmd []string
	// env are the image's NAME=value pairs.
	env []string
	// workingDir is the image's WORKDIR.
	workingDir string
	// user is the image's USER.
	user string
}

// processArgs returns the argv of a container, by Kubernetes' rules for a
// container's command and args over its image's ENTRYPOINT and CMD:
// command replaces the entrypoint and drops CMD; args alone replace CMD
// and keep the entrypoint; neither runs ENTRYPOINT followed by CMD. command
// and args are already expanded; the image's values are taken as they are.
// Empty means there is nothing to run.
func processArgs(command, args []string, img imageDefaults) []string {
	var out []string
	switch {
	case len(command) > 0:
		out = append(append(out, command...), args...)
	case len(args) > 0:
		out = append(append(out, img.entrypoint...), args...)
	default:
		out = append(append(out, img.entrypoint...), img.cmd...)
	}
	return out
}

// imageEnv returns the environment of a container that runs an image: the
// image's variables, PATH defaulted when the image has none, then set
// (the kubelet's and the container's own, in order) overriding by name.
func imageEnv(img imageDefaults, set []string) []string {
	env := &envList{}
	for _, kv := range img.env {
		name, value, _ := strings.Cut(kv, "=")
		if name != "" {
			env.set(name, value)
		}
	}
	if _, ok := env.get("PATH"); !ok {
		env.set("PATH", defaultPath)
	}
	for _, kv := range set {
		name, value, _ := strings.Cut(kv, "=")
		env.set(name, value)
	}
	return env.pairs()
}

// imageWorkingDir is where a container's process starts: its spec's
// workingDir, else the image's, else the root.
func imageWorkingDir(c *corev1.Container, img imageDefaults) string {
	switch {
	case c.WorkingDir != "":
		return c.WorkingDir
	case img.workingDir != "":
		return img.workingDir
	}
	return "/"
}

// defaultPullPolicy is the policy of a container whose imagePullPolicy is
// empty, as the apiserver defaults it: Always for the tag "latest" or no tag
// and no digest, IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// pullStep is what to do about a container's image before it starts.
type pullStep int

const (
	// useLocal: run the image the store has.
	useLocal pullStep = iota
	// pullImage: pull it (the registry decides what is current).
	pullImage
	// neverPulled: the image is absent and the policy forbids pulling.
	neverPulled
)

// decidePull decides, from the pull policy and whether the store has the
// image, as the kubelet does: Always pulls every time (a pull of an image
// already stored costs a manifest request); IfNotPresent pulls only a
// missing image; Never never pulls.
func decidePull(policy corev1.PullPolicy, present bool) pullStep {
	switch {
	case policy == corev1.PullAlways:
		return pullImage
	case present:
		return useLocal
	case policy == corev1.PullNever:
		return neverPulled
	}
	return pullImage
}
