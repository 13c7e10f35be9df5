package podconfig

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// defaultPath is the PATH of a container whose image and spec set none, as
// containerd's CRI plugin gives it.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ImageDefaults is what an image's config contributes to a container that
// runs it.
type ImageDefaults struct {
	// Entrypoint and Cmd are the image's ENTRYPOINT and CMD.
	Entrypoint, Cmd []string
	// Env are the image's NAME=value pairs.
	Env []string
	// WorkingDir is the image's WORKDIR.
	WorkingDir string
	// User is the image's USER.
	User string
}

// ProcessArgs returns the argv of a container, by Kubernetes' rules for a
// container's command and args over its image's ENTRYPOINT and CMD:
// command replaces the entrypoint and drops CMD; args alone replace CMD
// and keep the entrypoint; neither runs ENTRYPOINT followed by CMD. command
// and args are already expanded; the image's values are taken as they are.
// Empty means there is nothing to run.
func ProcessArgs(command, args []string, img ImageDefaults) []string {
	var out []string
	switch {
	case len(command) > 0:
		out = append(append(out, command...), args...)
	case len(args) > 0:
		out = append(append(out, img.Entrypoint...), args...)
	default:
		out = append(append(out, img.Entrypoint...), img.Cmd...)
	}
	return out
}

// ImageEnv returns the environment of a container that runs an image: the
// image's variables, PATH defaulted when the image has none, then set
// (the kubelet's and the container's own, in order) overriding by name.
func ImageEnv(img ImageDefaults, set []string) []string {
	env := &EnvList{}
	for _, kv := range img.Env {
		name, value, _ := strings.Cut(kv, "=")
		if name != "" {
			env.Set(name, value)
		}
	}
	if _, ok := env.Get("PATH"); !ok {
		env.Set("PATH", defaultPath)
	}
	for _, kv := range set {
		name, value, _ := strings.Cut(kv, "=")
		env.Set(name, value)
	}
	return env.Pairs()
}

// ImageWorkingDir is where a container's process starts: its spec's
// workingDir, else the image's, else the root.
func ImageWorkingDir(c *corev1.Container, img ImageDefaults) string {
	switch {
	case c.WorkingDir != "":
		return c.WorkingDir
	case img.WorkingDir != "":
		return img.WorkingDir
	}
	return "/"
}

// DefaultPullPolicy is the policy of a container whose imagePullPolicy is
// empty, as the apiserver defaults it: Always for the tag "latest" or no tag
// and no digest, IfNotPresent otherwise.
func DefaultPullPolicy(image string) corev1.PullPolicy {
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

// PullStep is what to do about a container's image before it starts.
type PullStep int

const (
	// UseLocal: run the image the store has.
	UseLocal PullStep = iota
	// PullImage: pull it (the registry decides what is current).
	PullImage
	// NeverPulled: the image is absent and the policy forbids pulling.
	NeverPulled
)

// DecidePull decides, from the pull policy and whether the store has the
// image, as the kubelet does: Always pulls every time (a pull of an image
// already stored costs a manifest request); IfNotPresent pulls only a
// missing image; Never never pulls.
func DecidePull(policy corev1.PullPolicy, present bool) PullStep {
	switch {
	case policy == corev1.PullAlways:
		return PullImage
	case present:
		return UseLocal
	case policy == corev1.PullNever:
		return NeverPulled
	}
	return PullImage
}

// WithDefaultTag is image with the tag "latest" when it names neither a
// tag nor a digest, as the kubelet names images in its pull events.
func WithDefaultTag(image string) string {
	if strings.Contains(image, "@") {
		return image
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if strings.Contains(name, ":") {
		return image
	}
	return image + ":latest"
}
