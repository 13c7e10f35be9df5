package podconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDecideFeatures(t *testing.T) {
	full := NodeFeatures{Isolated: true, Root: true}
	withUserns := NodeFeatures{Isolated: true, Root: true, UserNamespaces: true}
	withSC := func(sc *corev1.SecurityContext) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: sc}}}}
	}
	withPSC := func(psc *corev1.PodSecurityContext) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: psc, Containers: []corev1.Container{{Name: "c"}}}}
	}
	restricted := withSC(&corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	})
	limits := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		Containers:     []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
	}}
	withLimits := full
	withLimits.Limits = true
	for _, tc := range []struct {
		name           string
		pod            *corev1.Pod
		node           NodeFeatures
		wantReason     string
		wantIn         string
		wantUnenforced []string
	}{
		{name: "plain pod", pod: withSC(nil), node: full},
		{name: "honoured fields", node: full, pod: withSC(&corev1.SecurityContext{
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			ProcMount:                ptr.To(corev1.UnmaskedProcMount),
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile:          &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
		})},
		{name: "PSA restricted pod runs, warned", pod: restricted, node: full},
		{name: "capabilities are applied", node: full, pod: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"CHOWN"}}})},
		{name: "capabilities added without namespaces: none to add to", node: NodeFeatures{}, pod: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}),
			wantUnenforced: []string{`securityContext.capabilities.add (container "c")`}},
		{name: "capabilities dropped without namespaces: none held", node: NodeFeatures{}, pod: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}})},
		{name: "cpu and memory limits with cgroups: enforced", pod: limits, node: withLimits},
		{name: "other limits with cgroups: warned one by one, ephemeral-storage not (eviction)", node: withLimits, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"), "example.com/gpu": resource.MustParse("1")}}}}}},
			wantUnenforced: []string{`resources.limits.example.com/gpu (container "c")`}},
		{name: "an ephemeral-storage limit alone without cgroups: enforced by eviction", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}}}}}},
		{name: "a memory-backed emptyDir where it cannot be a tmpfs", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}},
			Volumes: []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}}},
			wantUnenforced: []string{`emptyDir.medium: Memory (volume "shm")`}},
		{name: "limits without cgroups are warned, requests are not", pod: limits, node: full,
			wantUnenforced: []string{`resources.limits (init container "i")`}},
		{name: "pod-level limits", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}, Containers: []corev1.Container{{Name: "c"}}}},
			wantUnenforced: []string{"resources.limits (pod)"}},
		{name: "pod seccomp RuntimeDefault and SELinux", node: full, pod: withPSC(&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}, SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"}}),
			wantUnenforced: []string{"securityContext.seLinuxOptions (pod)"}},
		{name: "seccomp RuntimeDefault without namespaces", node: NodeFeatures{}, pod: restricted,
			wantUnenforced: []string{`securityContext.seccompProfile RuntimeDefault (container "c")`}},
		{name: "resourceClaims", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-claim")}}, Containers: []corev1.Container{{Name: "c"}}}},
			wantReason: ReasonPodFeatureUnsupported, wantIn: "spec.resourceClaims"},
		{name: "restart all containers runs", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever), RestartPolicyRules: []corev1.ContainerRestartRule{{
				Action: corev1.ContainerRestartRuleActionRestartAllContainers, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}},
		{name: "env from a file runs (EnvFiles)", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{
			Name: "CONFIG", ValueFrom: &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "v", Path: "env", Key: "CONFIG"}}}}}}}}},
		{name: "hostUsers false as root with user namespaces", node: withUserns, pod: &corev1.Pod{Spec: corev1.PodSpec{HostUsers: ptr.To(false), Containers: []corev1.Container{{Name: "c"}}}}},
		{name: "hostUsers false as root without them", node: NodeFeatures{Isolated: true, Root: true, NoUserNamespaces: "no idmapped mounts"}, pod: &corev1.Pod{Spec: corev1.PodSpec{HostUsers: ptr.To(false), Containers: []corev1.Container{{Name: "c"}}}},
			wantReason: ReasonPodFeatureUnsupported, wantIn: "can't set `spec.hostUsers: false`, runtime does not support user namespaces: no idmapped mounts"},
		{name: "hostUsers false as another user (a user namespace per sandbox)", node: NodeFeatures{Isolated: true}, pod: &corev1.Pod{Spec: corev1.PodSpec{HostUsers: ptr.To(false), Containers: []corev1.Container{{Name: "c"}}}}},
		{name: "hostUsers true", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{HostUsers: ptr.To(true), Containers: []corev1.Container{{Name: "c"}}}}},
		{name: "privileged as root runs", node: full, pod: withSC(&corev1.SecurityContext{Privileged: ptr.To(true)})},
		{name: "privileged as another user", node: NodeFeatures{Isolated: true}, pod: withSC(&corev1.SecurityContext{Privileged: ptr.To(true)}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: `container "c": securityContext.privileged`},
		{name: "localhost seccomp", node: full, pod: withSC(&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}})},
		{name: "localhost seccomp without namespaces", node: NodeFeatures{Root: true}, pod: withSC(&corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: "securityContext.seccompProfile"},
		{name: "pod localhost seccomp without namespaces", node: NodeFeatures{Root: true}, pod: withPSC(&corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: "spec.securityContext.seccompProfile"},
		{name: "AppArmor RuntimeDefault, as a kubelet without AppArmor", node: full, pod: withSC(&corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}),
			wantReason: ReasonAppArmor, wantIn: "Cannot enforce AppArmor"},
		{name: "pod AppArmor", node: full, pod: withPSC(&corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("p")}}),
			wantReason: ReasonAppArmor, wantIn: "spec.securityContext.appArmorProfile"},
		{name: "AppArmor annotation", node: full, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "runtime/default"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}},
			wantReason: ReasonAppArmor, wantIn: "container.apparmor.security.beta.kubernetes.io/c"},
		{name: "AppArmor annotation unconfined", node: full, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "unconfined"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}},
		{name: "sysctls", node: full, pod: withPSC(&corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}}),
			wantReason: ReasonSysctlForbidden, wantIn: "net.ipv4.ip_local_port_range"},
		{name: "read-only root without a private view", node: NodeFeatures{Root: true}, pod: withSC(&corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: "securityContext.readOnlyRootFilesystem"},
		{name: "dnsConfig without a private view", node: NodeFeatures{Root: true}, pod: &corev1.Pod{Spec: corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}, Containers: []corev1.Container{{Name: "c"}}}},
			wantReason: ReasonPodFeatureUnsupported, wantIn: "spec.dnsConfig"},
		{name: "dnsConfig option name with a newline", node: full, pod: withDNS(&corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots:1\nnameserver 10.0.0.1"}}}),
			wantReason: ReasonInvalidDNSConfig, wantIn: `spec.dnsConfig.options[0].name: "ndots:1\nnameserver 10.0.0.1"`},
		{name: "dnsConfig option value with a blank", node: full, pod: withDNS(&corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "edns0"}, {Name: "ndots", Value: ptr.To("1 rotate")}}}),
			wantReason: ReasonInvalidDNSConfig, wantIn: "spec.dnsConfig.options[1].value"},
		{name: "dnsConfig search with a tab", node: full, pod: withDNS(&corev1.PodDNSConfig{Searches: []string{"a.example", "b\tc"}}),
			wantReason: ReasonInvalidDNSConfig, wantIn: "spec.dnsConfig.searches[1]"},
		{name: "dnsConfig nameserver with a carriage return", node: full, pod: withDNS(&corev1.PodDNSConfig{Nameservers: []string{"10.0.0.1\r"}}),
			wantReason: ReasonInvalidDNSConfig, wantIn: "spec.dnsConfig.nameservers[0]"},
		{name: "dnsConfig invalid without a private view names the entry", node: NodeFeatures{Root: true}, pod: withDNS(&corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "a b"}}}),
			wantReason: ReasonInvalidDNSConfig, wantIn: "spec.dnsConfig.options[0].name"},
		{name: "dnsConfig options as written", node: full, pod: withDNS(&corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"example.com."}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}, {Name: "timeout", Value: ptr.To("")}}})},
		{name: "host mode supplementalGroups and fsGroup given as root", node: NodeFeatures{Isolated: true, Root: true, HostMode: true}, pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{3000}, FSGroup: ptr.To[int64](2000)})},
		{name: "images mode supplementalGroups and fsGroup given", node: full, pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{3000}, FSGroup: ptr.To[int64](2000)})},
		{name: "host mode fsGroup not root still refused", node: NodeFeatures{Isolated: true, HostMode: true}, pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{3000}, FSGroup: ptr.To[int64](2000)}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: "spec.securityContext.fsGroup"},
		{name: "host mode supplementalGroups not root warned", node: NodeFeatures{Isolated: true, HostMode: true}, pod: withPSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{3000}}),
			wantUnenforced: []string{"securityContext.supplementalGroups (pod)"}},
		{name: "dnsConfig with a private view", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}, Containers: []corev1.Container{{Name: "c"}}}}},
		{name: "fsGroup as root", node: full, pod: withPSC(&corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000)})},
		{name: "fsGroup as another user", node: NodeFeatures{Isolated: true}, pod: withPSC(&corev1.PodSecurityContext{FSGroup: ptr.To[int64](2000)}),
			wantReason: ReasonPodFeatureUnsupported, wantIn: "spec.securityContext.fsGroup"},
		{name: "ephemeral privileged", node: NodeFeatures{Isolated: true}, pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}, EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}},
			wantReason: ReasonPodFeatureUnsupported, wantIn: `ephemeral container "debug"`},
		{name: "hostPID, hostIPC, hostNetwork are honoured", node: full, pod: &corev1.Pod{Spec: corev1.PodSpec{HostPID: true, HostIPC: true, HostNetwork: true, Containers: []corev1.Container{{Name: "c"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideFeatures(tc.pod, tc.node)
			if d.Reason != tc.wantReason || !strings.Contains(d.Message, tc.wantIn) {
				t.Errorf("decision = %q, %q; want %q containing %q", d.Reason, d.Message, tc.wantReason, tc.wantIn)
			}
			if d.Reason == "" {
				if diff := cmp.Diff(tc.wantUnenforced, d.Unenforced); diff != "" {
					t.Errorf("unenforced (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestNotEnforcedMessage(t *testing.T) {
	got := NotEnforcedMessage([]string{`resources.limits (container "b")`, `resources.limits (container "a")`})
	want := `The local node agent runs this pod without enforcing: resources.limits (container "a"), resources.limits (container "b") (see docs/node-agent.md)`
	if got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

// withDNS is a pod of one container with dnsConfig dc.
func withDNS(dc *corev1.PodDNSConfig) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{DNSConfig: dc, Containers: []corev1.Container{{Name: "c"}}}}
}
