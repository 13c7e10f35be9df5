package podconfig

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// fakeSources serves ConfigMaps, Secrets and volume files from maps.
type fakeSources struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
	// files are the volume files by "volume/path"; volumes the volumes.
	files   map[string]string
	volumes []string
}

func (f fakeSources) VolumeFile(_ context.Context, _ *corev1.Pod, volume, path string) (io.ReadCloser, string, error) {
	if !slices.Contains(f.volumes, volume) {
		return nil, "", fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", volume)
	}
	hostPath := "/pods/uid-1/volumes/" + volume + "/" + path
	content, ok := f.files[volume+"/"+path]
	if !ok {
		return nil, hostPath, &FileOpenError{Path: hostPath, Err: fs.ErrNotExist}
	}
	return io.NopCloser(strings.NewReader(content)), hostPath, nil
}

func (f fakeSources) ConfigMap(_ context.Context, _, name string) (map[string]string, error) {
	return f.configMaps[name], nil
}

func (f fakeSources) Secret(_ context.Context, _, name string) (map[string][]byte, error) {
	return f.secrets[name], nil
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestResolveEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"batch.kubernetes.io/job-completion-index": "2"},
		},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "sa"},
	}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	src := fakeSources{
		configMaps: map[string]map[string]string{"cm": {"K1": "v1", "K2": "v2"}, "files": {"app.conf": "a=1", "log-level": "debug"}},
		secrets:    map[string]map[string][]byte{"s": {"pw": []byte("hunter2")}},
		volumes:    []string{"config"},
		files: map[string]string{
			"config/config.env": "# written by init\nCONFIG_1='value1'\nCONFIG_2='value2'\nEMPTY=''\nSPACED= 'ignored'\n",
			"config/bad.env":    "K = 'v'\n",
		},
	}
	fileEnv := func(name, volume, path, key string, optional bool) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: volume, Path: path, Key: key, Optional: ptr.To(optional)}}}
	}
	cases := map[string]struct {
		container corev1.Container
		want      []string
		wantErr   string
	}{
		// EnvFiles (beta, on since 1.35), as upstream's e2e FileKeyRef
		// specs and the kubelet's messages.
		"fileKeyRef values, later variables expand them": {
			container: corev1.Container{Env: []corev1.EnvVar{
				fileEnv("CONFIG_1", "config", "config.env", "CONFIG_1", false),
				fileEnv("C2", "config", "config.env", "CONFIG_2", false),
				{Name: "BOTH", Value: "$(CONFIG_1)+$(C2)"},
			}},
			want: []string{"CONFIG_1=value1", "C2=value2", "BOTH=value1+value2"},
		},
		"fileKeyRef optional missing, empty or blank-led keys are left out": {
			container: corev1.Container{Env: []corev1.EnvVar{
				fileEnv("MISSING", "config", "config.env", "MISSING", true),
				fileEnv("EMPTY", "config", "config.env", "EMPTY", true),
				fileEnv("SPACED", "config", "config.env", "SPACED", true),
				fileEnv("EXISTING", "config", "config.env", "CONFIG_1", true),
			}},
			want: []string{"EXISTING=value1"},
		},
		"fileKeyRef key missing": {
			container: corev1.Container{Env: []corev1.EnvVar{fileEnv("M", "config", "config.env", "MISSING", false)}},
			wantErr:   `environment variable key "MISSING" not found in file "/pods/uid-1/volumes/config/config.env"`,
		},
		"fileKeyRef file missing, even optional": {
			container: corev1.Container{Env: []corev1.EnvVar{fileEnv("M", "config", "absent.env", "K", true)}},
			wantErr:   "couldn't parse env file",
		},
		"fileKeyRef file malformed": {
			container: corev1.Container{Env: []corev1.EnvVar{fileEnv("K", "config", "bad.env", "K", false)}},
			wantErr:   "couldn't parse env file",
		},
		"fileKeyRef volume not mounted": {
			container: corev1.Container{Env: []corev1.EnvVar{fileEnv("K", "other", "config.env", "K", false)}},
			wantErr:   `cannot find the volume "other" referenced by FileKeyRef`,
		},
		"missing configmap key, as the kubelet says it": {
			container: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "nope"}}}}},
			wantErr:   "couldn't find key nope in ConfigMap ns/cm",
		},
		"missing secret key, as the kubelet says it": {
			container: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "nope"}}}}},
			wantErr:   "couldn't find key nope in Secret ns/s",
		},
		"downward API fields": {
			container: corev1.Container{Env: []corev1.EnvVar{
				fieldEnv("JOB_COMPLETION_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
				fieldEnv("NAME", "metadata.name"),
				fieldEnv("NS", "metadata.namespace"),
				fieldEnv("UID", "metadata.uid"),
				fieldEnv("APP", "metadata.labels['app']"),
				fieldEnv("NODE", "spec.nodeName"),
				fieldEnv("SA", "spec.serviceAccountName"),
				fieldEnv("IP", "status.podIP"),
				fieldEnv("HOSTIP", "status.hostIP"),
			}},
			want: []string{"JOB_COMPLETION_INDEX=2", "NAME=p", "NS=ns", "UID=uid-1", "APP=web", "NODE=node-a", "SA=sa", "IP=127.0.0.1", "HOSTIP=127.0.0.1"},
		},
		// Since relaxed env var names went GA (1.34) the kubelet passes every
		// envFrom key as it is: no key skipped, no InvalidEnvironmentVariableNames event.
		"envFrom keys that are not C identifiers are kept": {
			container: corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "files"}}}}},
			want:      []string{"app.conf=a=1", "log-level=debug"},
		},
		"values expand earlier variables": {
			container: corev1.Container{Env: []corev1.EnvVar{
				{Name: "A", Value: "x"},
				{Name: "B", Value: "$(A)-y-$(C)"},
				{Name: "A", Value: "z"},
			}},
			want: []string{"A=z", "B=x-y-$(C)"},
		},
		"envFrom then env override": {
			container: corev1.Container{
				EnvFrom: []corev1.EnvFromSource{{Prefix: "P_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
				Env: []corev1.EnvVar{
					{Name: "P_K1", Value: "over"},
					{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "pw"}}},
					{Name: "OPT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "nope", Optional: ptr.To(true)}}},
				},
			},
			want: []string{"P_K1=over", "P_K2=v2", "PW=hunter2"},
		},
		"resource field refs": {
			container: corev1.Container{
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
				Env: []corev1.EnvVar{
					{Name: "REQ_CPU_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
					{Name: "REQ_CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu"}}},
					{Name: "LIM_MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
				},
			},
			want: []string{"REQ_CPU_M=250", "REQ_CPU=1", "LIM_MEM_MI=1024"},
		},
		"missing configmap is an error": {
			container: corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}}}},
			wantErr:   `configmap "absent" not found`,
		},
		"unsupported field path is an error": {
			container: corev1.Container{Env: []corev1.EnvVar{fieldEnv("X", "spec.bogus")}},
			wantErr:   `unsupported fieldRef "spec.bogus"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env, err := ResolveEnv(context.Background(), pod, &tc.container, alloc, nil, src)
			if got := fmt.Sprint(err); (err != nil || tc.wantErr != "") && got != tc.wantErr {
				t.Fatalf("ResolveEnv() error = %v, want %q", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, env.Pairs()); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
