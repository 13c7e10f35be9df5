package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"jobkeeper.dev/jobkeeper/test/builder"
)

// busyApps is how many different app labels the busy workload's pods of no
// Job carry (as Deployments' pods would).
const busyApps = 100

// deploymentPod makes p look like the pod of a Deployment as a cluster's
// admission and a kubelet leave it: labels and annotations, a ReplicaSet
// controller reference, an application container and a sidecar with ports,
// environment, resources, probes and mounts, a config volume and a
// projected volume like the service account one (without the token, which
// needs a service account the bench's control plane does not make), and
// the default tolerations. It
// is what a busy cluster's other pods cost a controller that caches them.
func deploymentPod(p *corev1.Pod, i int, owners []metav1.OwnerReference) {
	app := fmt.Sprintf("app-%02d", i%busyApps)
	p.Labels = map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "pod-template-hash": "6d4cf56db6", "tier": "web"}
	p.Annotations = map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090", "kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z"}
	p.OwnerReferences = []metav1.OwnerReference{owners[i%busyApps]}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	mounts := []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	env := []corev1.EnvVar{{Name: "APP_NAME", Value: app}, {Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}}
	p.Spec.Containers = []corev1.Container{
		{Name: "app", Image: "registry.example.com/shop/" + app + ":1.4.2", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
			Env: env, Resources: res, LivenessProbe: probe("/healthz"), ReadinessProbe: probe("/readyz"), VolumeMounts: mounts,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent},
		{Name: "proxy", Image: "registry.example.com/infra/envoy:1.31.0", Args: []string{"--config-path", "/etc/app/envoy.yaml", "--log-level", "warn"},
			Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}}, Resources: res, VolumeMounts: mounts,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent},
	}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}, DefaultMode: ptr.To[int32](0o644)}}},
		{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}},
	}
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	p.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
}

// createRunningPods creates n pods named p-<i> in ns and writes them Running
// as a kubelet would (a start time, a running container, Ready). When
// owner is nil they belong to no Job and carry an app label; otherwise
// owner gives pod i its labels, controller reference and finalizers.
func createRunningPods(ctx context.Context, c kubernetes.Interface, ns string, n int, owner func(p *corev1.Pod)) error {
	spec := builder.MakeJob("template", ns).Obj().Spec.Template.Spec
	var owners []metav1.OwnerReference
	if owner == nil {
		// Real owners: the garbage collector deletes pods whose owner does
		// not exist. Nothing runs these ReplicaSets in the bench's control
		// plane, so their pods stay as created.
		for a := range busyApps {
			rs := &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%02d-6d4cf56db6", a), Namespace: ns},
				Spec: appsv1.ReplicaSetSpec{
					Replicas: ptr.To[int32](int32(n / busyApps)),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": fmt.Sprintf("app-%02d", a)}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": fmt.Sprintf("app-%02d", a)}}, Spec: *spec.DeepCopy()},
				},
			}
			rs.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
			created, err := c.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating ReplicaSet %s: %w", rs.Name, err)
			}
			owners = append(owners, *metav1.NewControllerRef(created, appsv1.SchemeGroupVersion.WithKind("ReplicaSet")))
		}
	}
	started := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	return parallelDo(ctx, n, func(ctx context.Context, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%05d", i), Namespace: ns},
			Spec:       *spec.DeepCopy(),
		}
		p.Spec.NodeName = "bench-node"
		if owner == nil {
			deploymentPod(p, i, owners)
		} else {
			owner(p)
		}
		created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		running := func(created *corev1.Pod) {
			created.Status = corev1.PodStatus{
				Phase:     corev1.PodRunning,
				StartTime: &started,
				PodIP:     "10.244.0.1",
				PodIPs:    []corev1.PodIP{{IP: "10.244.0.1"}},
				HostIP:    "192.168.0.10",
				HostIPs:   []corev1.HostIP{{IP: "192.168.0.10"}},
				QOSClass:  created.Status.QOSClass,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
				},
			}
			for _, ctr := range created.Spec.Containers {
				created.Status.ContainerStatuses = append(created.Status.ContainerStatuses, corev1.ContainerStatus{
					Name: ctr.Name, Image: ctr.Image, ImageID: "sha256:0123456789abcdef", ContainerID: "containerd://" + created.Name,
					Ready: true, Started: func() *bool { b := true; return &b }(),
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
				})
			}
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			running(created)
			_, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				if fresh, gerr := c.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{}); gerr == nil {
					created = fresh
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("writing pod %s Running: %w", p.Name, err)
		}
		return nil
	})
}
