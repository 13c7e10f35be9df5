package podconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// SourceLookup fetches the ConfigMaps, Secrets and volume files that env
// refers to.
type SourceLookup interface {
	// ConfigMap returns the data of a ConfigMap, nil if it does not exist.
	ConfigMap(ctx context.Context, ns, name string) (map[string]string, error)
	// Secret returns the data of a Secret, nil if it does not exist.
	Secret(ctx context.Context, ns, name string) (map[string][]byte, error)
	// VolumeFile opens the file at path inside the pod's volume called
	// volume, resolved so that it cannot leave the volume, and returns
	// where it is on the host (for messages). A file that cannot be
	// opened is a *FileOpenError; other errors (no such volume) are ones
	// the container is told.
	VolumeFile(ctx context.Context, pod *corev1.Pod, volume, path string) (io.ReadCloser, string, error)
}

// EnvVar is one resolved variable.
type EnvVar struct {
	// Name is the variable's name.
	Name string
	// Value is its value.
	Value string
}

// EnvList is an ordered environment where a later definition replaces an
// earlier one in place.
type EnvList struct {
	// Vars in definition order.
	Vars []EnvVar
	// index maps a name to its position in vars.
	index map[string]int
}

// Set defines or replaces name.
func (l *EnvList) Set(name, value string) {
	if l.index == nil {
		l.index = map[string]int{}
	}
	if i, ok := l.index[name]; ok {
		l.Vars[i].Value = value
		return
	}
	l.index[name] = len(l.Vars)
	l.Vars = append(l.Vars, EnvVar{Name: name, Value: value})
}

// Get returns the value of name.
func (l *EnvList) Get(name string) (string, bool) {
	i, ok := l.index[name]
	if !ok {
		return "", false
	}
	return l.Vars[i].Value, true
}

// Pairs returns NAME=value strings.
func (l *EnvList) Pairs() []string {
	out := make([]string, 0, len(l.Vars))
	for _, v := range l.Vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// ResolveEnv computes a container's environment the way the kubelet does:
// envFrom sources first, then env in order, each value expanded against the
// variables defined before it and then the service variables (services,
// may be nil), then the service variables the container does not define
// itself. allocatable is used for resourceFieldRef limits the container
// does not set.
func ResolveEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, allocatable corev1.ResourceList, services *EnvList, src SourceLookup) (*EnvList, error) {
	if services == nil {
		services = &EnvList{}
	}
	env := &EnvList{}
	lookup := func(name string) (string, bool) {
		if v, ok := env.Get(name); ok {
			return v, true
		}
		return services.Get(name)
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			data, err := src.ConfigMap(ctx, pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				return nil, err
			}
			if data == nil {
				if Optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
			}
			for _, k := range sortedKeys(data) {
				env.Set(from.Prefix+k, data[k])
			}
		case from.SecretRef != nil:
			data, err := src.Secret(ctx, pod.Namespace, from.SecretRef.Name)
			if err != nil {
				return nil, err
			}
			if data == nil {
				if Optional(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
			}
			for _, k := range sortedKeys(data) {
				env.Set(from.Prefix+k, string(data[k]))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.Set(e.Name, Expand(e.Value, lookup))
			continue
		}
		v, ok, err := valueFrom(ctx, pod, c, e.ValueFrom, allocatable, src)
		if err != nil {
			return nil, err
		}
		if ok {
			env.Set(e.Name, v)
		}
	}
	for _, v := range services.Vars {
		if _, defined := env.Get(v.Name); !defined {
			env.Set(v.Name, v.Value)
		}
	}
	return env, nil
}

// valueFrom resolves one env source; ok is false for a missing optional key.
func valueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, from *corev1.EnvVarSource, allocatable corev1.ResourceList, src SourceLookup) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := PodField(pod, from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := ContainerResource(c, from.ResourceFieldRef, allocatable)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		data, err := src.ConfigMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			return "", false, err
		}
		v, found := data[ref.Key]
		if !found {
			if Optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, pod.Namespace, ref.Name)
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		data, err := src.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			return "", false, err
		}
		v, found := data[ref.Key]
		if !found {
			if Optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	case from.FileKeyRef != nil:
		return fileValue(ctx, pod, from.FileKeyRef, src)
	}
	return "", false, fmt.Errorf("unsupported env source")
}

// fileValue resolves an env valueFrom.fileKeyRef as the kubelet does, at
// each start of the container: the key's value in the file, which must be
// there and well formed (optional excuses only a key the file lacks, or
// leaves empty). Why a file could not be read or parsed goes to the log;
// the container is told only ErrEnvFileUnparsable.
func fileValue(ctx context.Context, pod *corev1.Pod, ref *corev1.FileKeySelector, src SourceLookup) (string, bool, error) {
	f, hostPath, err := src.VolumeFile(ctx, pod, ref.VolumeName, ref.Path)
	if openErr := (*FileOpenError)(nil); errors.As(err, &openErr) {
		klog.FromContext(ctx).Error(err, "Failed to parse env file", "pod", klog.KObj(pod))
		return "", false, errors.New(ErrEnvFileUnparsable)
	}
	if err != nil {
		return "", false, err
	}
	defer func() { _ = f.Close() }()
	v, err := LookupEnvFile(f, ref.Key)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to parse env file", "pod", klog.KObj(pod), "file", hostPath)
		return "", false, errors.New(ErrEnvFileUnparsable)
	}
	if v == "" {
		if Optional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, hostPath)
	}
	return v, true, nil
}

// FileOpenError is a file of a volume that could not be opened.
type FileOpenError struct {
	// Path is the file's host path.
	Path string
	// Err is why.
	Err error
}

// Error implements error.
func (e *FileOpenError) Error() string {
	return fmt.Sprintf("failed to open environment variable file %q: %v", e.Path, e.Err)
}

// Unwrap returns why.
func (e *FileOpenError) Unwrap() error { return e.Err }

// PodField resolves a downward-API field path.
func PodField(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP(pod), nil
	case "status.podIP", "status.podIPs":
		// The worker gives the pod's own address, once it has one, in
		// the status it resolves from (as the kubelet uses the sandbox's).
		if pod.Status.PodIP != "" {
			if path == "status.podIP" {
				return pod.Status.PodIP, nil
			}
			ips := make([]string, 0, len(pod.Status.PodIPs))
			for _, ip := range pod.Status.PodIPs {
				ips = append(ips, ip.IP)
			}
			if len(ips) == 0 {
				ips = append(ips, pod.Status.PodIP)
			}
			return strings.Join(ips, ","), nil
		}
		return hostIP(pod), nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// hostIP is the address of the pod's node: its status's once the node
// agent set it, else NodeIP.
func hostIP(pod *corev1.Pod) string {
	return cmp.Or(pod.Status.HostIP, NodeIP)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// ContainerResource resolves a resourceFieldRef like the kubelet: a limit
// the container does not set is the node's allocatable; values are divided
// by the divisor and rounded up.
func ContainerResource(c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	rn := corev1.ResourceName(name)
	var q resource.Quantity
	var found bool
	if kind == "limits" {
		q, found = c.Resources.Limits[rn]
	} else {
		q, found = c.Resources.Requests[rn]
		if !found {
			q, found = c.Resources.Limits[rn]
		}
	}
	if !found {
		q = allocatable[rn]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if rn == corev1.ResourceCPU {
		v := int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))
		return strconv.FormatInt(v, 10), nil
	}
	v := int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))
	return strconv.FormatInt(v, 10), nil
}

// Optional dereferences an optional flag.
func Optional(b *bool) bool { return b != nil && *b }
