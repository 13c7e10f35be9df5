package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/utils/clock"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/podconfig"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
)

// Reasons of pods the node agent refuses to run. The pod fails at once
// (phase Failed with this reason) and a Warning event with the same reason
// and message is recorded on it, as a kubelet does for a pod it rejects at
// admission.
const (
	// ReasonUnsupportedVolume: the pod has a volume of a kind the node
	// agent cannot provide.
	ReasonUnsupportedVolume = "UnsupportedVolume"
	// ReasonNoPrivateFilesystem: the pod has volumes, and this machine
	// cannot give containers the private filesystem view they are mounted
	// in; running it would let it write to host paths.
	ReasonNoPrivateFilesystem = "NoPrivateFilesystem"
)

// Manager prepares pod volumes on the host: a directory per volume
// under the pod's directory (emptyDir; configMap, secret, downwardAPI and
// projected files written when the pod's first container starts, in the
// kubelet's atomic layout, and refreshed while it runs: refresh.go), or the
// host path itself. The runtime mounts them in each container's view; they
// go with the pod's directory.
type Manager struct {
	// cfg is what the manager needs from the agent.
	cfg Config
	// mu guards ready.
	mu sync.Mutex
	// ready holds the pods whose volumes are written.
	ready map[types.UID]bool
	// claims holds the paths of the pods' persistentVolumeClaim volumes.
	claims claimPaths
	// takenOver holds the pods whose containers a previous run of the
	// agent started and this one took over: their volumes were written by
	// that run and are refreshed, although ready is not set before one of
	// their containers starts again (refresh.go).
	takenOver map[types.UID]bool
	// refreshMu serialises refreshes with forget.
	refreshMu sync.Mutex
	// tokensMu guards tokens.
	tokensMu sync.Mutex
	// tokens are the projected tokens written, reused until they need a
	// refresh.
	tokens map[tokenKey]issuedToken
}

// Config is what a volume manager needs from the agent.
type Config struct {
	// Client reads ConfigMaps, Secrets and claims, and requests tokens.
	Client kubernetes.Interface
	// Clock times tokens and refreshes.
	Clock clock.WithTicker
	// Pods lists the pods bound to the node, whose volumes are refreshed.
	Pods corelisters.PodLister
	// Capacity is the node's, for downwardAPI resource fields without a
	// limit.
	Capacity corev1.ResourceList
	// EUID is the agent's effective user ID: only root gives volumes a
	// group (fsGroup).
	EUID int
	// PodDir is the directory of a pod on the host.
	PodDir func(types.UID) string
	// Event records a node event on a pod.
	Event func(pod *corev1.Pod, eventType, reason, message string)
	// Runtime is the agent's runtime, once set up.
	Runtime func() runtime.Runtime
}

// Isolated reports whether rt gives containers a private filesystem view.
func Isolated(rt runtime.Runtime) bool {
	iso, ok := rt.(runtime.Isolator)
	if !ok {
		return false
	}
	yes, _ := iso.Isolation()
	return yes
}

// New returns a volume manager.
func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, ready: map[types.UID]bool{}, takenOver: map[types.UID]bool{}, tokens: map[tokenKey]issuedToken{}}
}

// Known reports whether the manager holds anything about a pod's volumes:
// written by this run (ready) or by the previous one (taken over).
func (m *Manager) Known(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ready[uid] || m.takenOver[uid]
}

// Forget drops what is known about a pod's volumes.
func (m *Manager) Forget(uid types.UID) {
	m.refreshMu.Lock()
	defer m.refreshMu.Unlock()
	m.mu.Lock()
	delete(m.ready, uid)
	delete(m.takenOver, uid)
	m.mu.Unlock()
	m.claims.forget(uid)
	m.tokensMu.Lock()
	for k := range m.tokens {
		if k.pod == uid {
			delete(m.tokens, k)
		}
	}
	m.tokensMu.Unlock()
}

// UnsupportedVolume says why a volume cannot be provided here, "" when it
// can.
func UnsupportedVolume(v *corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.EmptyDir != nil, s.ConfigMap != nil, s.Secret != nil, s.DownwardAPI != nil, s.HostPath != nil, s.PersistentVolumeClaim != nil, s.Image != nil:
		return ""
	case s.Projected != nil:
		for _, p := range s.Projected.Sources {
			if p.ClusterTrustBundle != nil || p.PodCertificate != nil {
				return fmt.Sprintf("volume %q: projected clusterTrustBundle and podCertificate sources are not supported by the local node agent", v.Name)
			}
		}
		return ""
	}
	return fmt.Sprintf("volume %q: only emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and image volumes are supported by the local node agent", v.Name)
}

// Mounts returns the mounts of container c, preparing the pod's volumes
// first when they are not ready. env expands subPathExpr.
func (m *Manager) Mounts(ctx context.Context, pod *corev1.Pod, c *corev1.Container, env func(string) (string, bool)) ([]runtime.Mount, error) {
	if _, ok := m.cfg.Runtime().(runtime.Isolator); !ok || (len(c.VolumeMounts) == 0 && len(pod.Spec.Volumes) == 0) {
		// A runtime that runs nothing on the host needs no volumes.
		return nil, nil
	}
	if err := m.Prepare(ctx, pod); err != nil {
		return nil, err
	}
	var out []runtime.Mount
	for _, vm := range c.VolumeMounts {
		v := volumeNamed(pod, vm.Name)
		if v == nil {
			return nil, fmt.Errorf("volume mount %q: no volume of that name", vm.Name)
		}
		if ServiceAccountVolume(v) && !Isolated(m.cfg.Runtime()) {
			continue
		}
		source := m.source(pod, v)
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = podconfig.Expand(vm.SubPathExpr, env)
		}
		if sub != "" && (filepath.IsAbs(sub) || strings.Contains(filepath.ToSlash(sub), "..")) {
			return nil, fmt.Errorf("volume mount %q: subPath %q must be a relative path without '..'", vm.Name, sub)
		}
		// The runtime resolves the subPath inside the volume by handle
		// (and creates it when missing, as the kubelet does): resolved
		// here, a container sharing the volume could swap a link in
		// between.
		rro, err := podconfig.RecursiveReadOnly(vm, SupportsRecursiveReadOnly(m.cfg.Runtime()))
		if err != nil {
			return nil, err
		}
		m := runtime.Mount{Source: source, SubPath: sub, Target: vm.MountPath,
			ReadOnly: vm.ReadOnly || alwaysReadOnly(v) || claimReadOnly(v), RecursiveReadOnly: rro}
		if v.Image != nil {
			// Its layers are the image's, which the caller fills.
			m.Source, m.ImageVolume = "", v.Name
		}
		out = append(out, m)
	}
	return out, nil
}

// SupportsRecursiveReadOnly reports whether rt honours recursively
// read-only mounts.
func SupportsRecursiveReadOnly(rt runtime.Runtime) bool {
	r, ok := rt.(runtime.RecursiveReadOnlyMounter)
	return ok && r.RecursiveReadOnlyMounts()
}

// serviceAccountVolumePrefix starts the name of the projected volume the
// ServiceAccount admission plugin adds to pods (kube-api-access-<random>).
const serviceAccountVolumePrefix = "kube-api-access-"

// ServiceAccountVolume reports the ServiceAccount admission plugin's token
// volume. A node that cannot mount volumes (no private filesystem view)
// runs the pod without it rather than refuse every pod: its containers
// then have no token at /var/run/secrets/kubernetes.io/serviceaccount.
func ServiceAccountVolume(v *corev1.Volume) bool {
	return v.Projected != nil && strings.HasPrefix(v.Name, serviceAccountVolumePrefix)
}

// alwaysReadOnly reports volumes the kubelet always mounts read-only.
func alwaysReadOnly(v *corev1.Volume) bool {
	s := v.VolumeSource
	return s.ConfigMap != nil || s.Secret != nil || s.DownwardAPI != nil || s.Projected != nil || s.Image != nil
}

// volumeNamed returns the pod's volume called name.
func volumeNamed(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// Source is the host path of the pod's volume called name ("" when the
// pod has none).
func (m *Manager) Source(pod *corev1.Pod, name string) string {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return m.source(pod, &pod.Spec.Volumes[i])
		}
	}
	return ""
}

// source is the host path a volume is mounted from.
func (m *Manager) source(pod *corev1.Pod, v *corev1.Volume) string {
	if v.HostPath != nil {
		return filepath.Clean(v.HostPath.Path)
	}
	if v.PersistentVolumeClaim != nil {
		return m.claims.path(pod.UID, v.Name)
	}
	return filepath.Join(m.cfg.PodDir(pod.UID), "volumes", v.Name)
}

// Prepare writes every volume of pod once. A failure records a FailedMount
// event and is returned; the next attempt tries again.
func (m *Manager) Prepare(ctx context.Context, pod *corev1.Pod) error {
	m.mu.Lock()
	ready := m.ready[pod.UID]
	m.mu.Unlock()
	if ready {
		return nil
	}
	if err := m.prepareClaims(ctx, pod); err != nil {
		return err
	}
	isolated := Isolated(m.cfg.Runtime())
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if ServiceAccountVolume(v) && !isolated {
			continue
		}
		if err := m.prepareVolume(ctx, pod, v); err != nil {
			msg := fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", v.Name, err)
			m.cfg.Event(pod, corev1.EventTypeWarning, "FailedMount", msg)
			return errors.New(msg)
		}
	}
	m.mu.Lock()
	m.ready[pod.UID] = true
	m.mu.Unlock()
	return nil
}

// prepareVolume makes one volume's source on the host.
func (m *Manager) prepareVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	if msg := UnsupportedVolume(v); msg != "" {
		return errors.New(msg)
	}
	if v.HostPath != nil {
		return checkHostPath(v.HostPath)
	}
	if v.PersistentVolumeClaim != nil || v.Image != nil {
		// Looked up by prepareClaims; an image volume is its image,
		// resolved by the pod's worker, made by the runtime.
		return nil
	}
	dir := m.source(pod, v)
	if v.EmptyDir != nil {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		if v.EmptyDir.Medium == corev1.StorageMediumMemory && m.MemoryMediumHonoured() {
			if err := mountTmpfs(dir, emptyDirTmpfsSize(pod, v.EmptyDir, m.cfg.Capacity)); err != nil {
				return err
			}
		}
		// World-writable like the kubelet's, whatever the umask; as the
		// kubelet, only when the permissions differ, so that a tmpfs
		// keeps its sticky bit.
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != 0o777 {
			if err := os.Chmod(dir, 0o777); err != nil {
				return err
			}
		}
		return m.applyFSGroup(pod, dir, false, nil)
	}
	files, err := m.projection(ctx, nil, pod, v)
	if err != nil {
		return err
	}
	// What a previous run of the agent left is replaced whole; the files
	// have the pod's fsGroup before they are swapped in.
	changed, err := writeAtomicWith(dir, files, m.cfg.Clock.Now(), func() error { return m.applyFSGroup(pod, dir, true, nil) })
	if err != nil || changed {
		return err
	}
	// Unchanged since a previous run of the agent wrote it.
	return m.applyFSGroup(pod, dir, true, nil)
}

// checkHostPath applies a hostPath volume's type, creating the path for
// the *OrCreate types.
func checkHostPath(h *corev1.HostPathVolumeSource) error {
	p := h.Path
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	if t == corev1.HostPathUnset {
		return nil
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("hostPath type check failed: creating %s: %w", p, err)
		}
	case corev1.HostPathFileOrCreate:
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("hostPath type check failed: creating %s: %w", p, err)
			}
			_ = f.Close()
		}
	}
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %s does not exist", p)
	}
	mode := st.Mode()
	ok := true
	switch t {
	case corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory:
		ok = mode.IsDir()
	case corev1.HostPathFileOrCreate, corev1.HostPathFile:
		ok = mode.IsRegular()
	case corev1.HostPathSocket:
		ok = mode&os.ModeSocket != 0
	case corev1.HostPathCharDev:
		ok = mode&os.ModeCharDevice != 0
	case corev1.HostPathBlockDev:
		ok = mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0
	default:
		return fmt.Errorf("hostPath type check failed: unknown type %q", t)
	}
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", p, hostPathNoun(t))
	}
	return nil
}

// hostPathNoun names what a hostPath type wants.
func hostPathNoun(t corev1.HostPathType) string {
	switch t {
	case corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory:
		return "directory"
	case corev1.HostPathFileOrCreate, corev1.HostPathFile:
		return "file"
	case corev1.HostPathSocket:
		return "socket file"
	case corev1.HostPathCharDev:
		return "character device"
	}
	return "block device"
}

// ProjectedFile is one file of a configMap, secret, downwardAPI or
// projected volume.
type ProjectedFile struct {
	// Path is relative to the volume.
	Path string
	// Data is the content.
	Data []byte
	// Mode is the file's permission bits.
	Mode int32
}

// projection computes the files of a configMap, secret, downwardAPI or
// projected volume, reading ConfigMaps and Secrets through reads (nil: from
// the API each time).
func (m *Manager) projection(ctx context.Context, reads *objectReads, pod *corev1.Pod, v *corev1.Volume) ([]ProjectedFile, error) {
	s := v.VolumeSource
	switch {
	case s.ConfigMap != nil:
		return m.configMapFiles(ctx, reads, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, modeOr(s.ConfigMap.DefaultMode), podconfig.Optional(s.ConfigMap.Optional))
	case s.Secret != nil:
		return m.secretFiles(ctx, reads, pod.Namespace, s.Secret.SecretName, s.Secret.Items, modeOr(s.Secret.DefaultMode), podconfig.Optional(s.Secret.Optional))
	case s.DownwardAPI != nil:
		return m.downwardFiles(pod, s.DownwardAPI.Items, modeOr(s.DownwardAPI.DefaultMode))
	}
	var out []ProjectedFile
	mode := modeOr(s.Projected.DefaultMode)
	for _, p := range s.Projected.Sources {
		var files []ProjectedFile
		var err error
		switch {
		case p.ConfigMap != nil:
			files, err = m.configMapFiles(ctx, reads, pod.Namespace, p.ConfigMap.Name, p.ConfigMap.Items, mode, podconfig.Optional(p.ConfigMap.Optional))
		case p.Secret != nil:
			files, err = m.secretFiles(ctx, reads, pod.Namespace, p.Secret.Name, p.Secret.Items, mode, podconfig.Optional(p.Secret.Optional))
		case p.DownwardAPI != nil:
			files, err = m.downwardFiles(pod, p.DownwardAPI.Items, mode)
		case p.ServiceAccountToken != nil:
			files, err = m.tokenFile(ctx, pod, p.ServiceAccountToken, mode)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

// modeOr returns a volume's default mode, 0644 when unset (the API
// server sets it, so only objects that bypassed defaulting lack it).
func modeOr(m *int32) int32 {
	if m == nil {
		return 0o644
	}
	return *m
}

// keyFiles turns a ConfigMap's or Secret's data into files: every key, or
// the listed items (a missing key is an error unless optional).
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, mode int32, opt bool) ([]ProjectedFile, error) {
	var out []ProjectedFile
	if len(items) == 0 {
		for k, v := range data {
			out = append(out, ProjectedFile{Path: k, Data: v, Mode: mode})
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if opt {
				continue
			}
			return nil, fmt.Errorf("%s references non-existent %s key: %s", kind, kind, it.Key)
		}
		f := ProjectedFile{Path: it.Path, Data: v, Mode: mode}
		if it.Mode != nil {
			f.Mode = *it.Mode
		}
		out = append(out, f)
	}
	_ = name
	return out, nil
}

// configMapFiles reads a ConfigMap's files.
func (m *Manager) configMapFiles(ctx context.Context, reads *objectReads, ns, name string, items []corev1.KeyToPath, mode int32, opt bool) ([]ProjectedFile, error) {
	cm, err := reads.configMap(ctx, m.cfg.Client, ns, name)
	if apierrors.IsNotFound(err) {
		if opt {
			return nil, nil
		}
		return nil, fmt.Errorf("configmap %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, mode, opt)
}

// secretFiles reads a Secret's files.
func (m *Manager) secretFiles(ctx context.Context, reads *objectReads, ns, name string, items []corev1.KeyToPath, mode int32, opt bool) ([]ProjectedFile, error) {
	s, err := reads.secret(ctx, m.cfg.Client, ns, name)
	if apierrors.IsNotFound(err) {
		if opt {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %q not found", name)
	}
	if err != nil {
		return nil, err
	}
	return keyFiles("secret", name, s.Data, items, mode, opt)
}

// downwardFiles computes a downward API volume's files.
func (m *Manager) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode int32) ([]ProjectedFile, error) {
	var out []ProjectedFile
	for _, it := range items {
		var value string
		switch {
		case it.FieldRef != nil && it.FieldRef.FieldPath == "metadata.labels":
			value = fieldpath.FormatMap(pod.Labels)
		case it.FieldRef != nil && it.FieldRef.FieldPath == "metadata.annotations":
			value = fieldpath.FormatMap(pod.Annotations)
		case it.FieldRef != nil:
			v, err := podconfig.PodField(pod, it.FieldRef.FieldPath)
			if err != nil {
				return nil, err
			}
			value = v
		case it.ResourceFieldRef != nil:
			c := containerNamed(pod, it.ResourceFieldRef.ContainerName)
			if c == nil {
				return nil, fmt.Errorf("downwardAPI item %q: no container %q", it.Path, it.ResourceFieldRef.ContainerName)
			}
			v, err := podconfig.ContainerResource(c, it.ResourceFieldRef, m.cfg.Capacity)
			if err != nil {
				return nil, err
			}
			value = v
		}
		f := ProjectedFile{Path: it.Path, Data: []byte(value), Mode: mode}
		if it.Mode != nil {
			f.Mode = *it.Mode
		}
		out = append(out, f)
	}
	return out, nil
}

// containerNamed returns the pod's container (or init container) called
// name.
func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// tokenFile requests a service account token bound to the pod.
func (m *Manager) tokenFile(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection, mode int32) ([]ProjectedFile, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: p.ExpirationSeconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	ttl := time.Hour
	if p.ExpirationSeconds != nil {
		ttl = time.Duration(*p.ExpirationSeconds) * time.Second
	}
	key := tokenKey{pod: pod.UID, account: sa, audience: p.Audience, ttl: ttl}
	now := m.cfg.Clock.Now()
	m.tokensMu.Lock()
	cached, ok := m.tokens[key]
	m.tokensMu.Unlock()
	if ok && !tokenNeedsRefresh(cached.issued, ttl, now) {
		return []ProjectedFile{{Path: p.Path, Data: cached.token, Mode: mode}}, nil
	}
	tr, err := m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for service account %q: %w", sa, err)
	}
	m.tokensMu.Lock()
	m.tokens[key] = issuedToken{token: []byte(tr.Status.Token), issued: now}
	m.tokensMu.Unlock()
	return []ProjectedFile{{Path: p.Path, Data: []byte(tr.Status.Token), Mode: mode}}, nil
}
