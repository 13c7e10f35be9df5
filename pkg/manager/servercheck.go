package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"
)

// MinServerVersion is the oldest Kubernetes version the Job controller runs
// on: the first where spec.managedBy of Jobs (JobManagedBy) is on by default.
var MinServerVersion = utilversion.MajorMinor(1, 32)

// serverCheckFieldManager names the start-up check's dry-run writes.
const serverCheckFieldManager = "jobkeeper-server-check"

// serverCheckBackoff spaces the retries of a start-up check that failed for
// a reason that may pass (the apiserver unreachable, overloaded, timing
// out): about half a minute in all before giving up.
var serverCheckBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 10 * time.Second}

// jobField is a field of the Job API that the Job controller relies on and
// that kube-apiserver drops from a Job it stores when the feature gate
// guarding the field is off.
type jobField struct {
	// path is the field's path, as users write it.
	path string
	// gate is the kube-apiserver feature gate that guards it.
	gate string
	// defaultOn is the first Kubernetes version where the gate is on by default.
	defaultOn string
	// why says what breaks without it.
	why string
	// kept reports whether a stored Job still has the field.
	kept func(*batchv1.Job) bool
}

// jobFields are the fields the start-up check's probe Job sets. The Job
// controller follows v1.36, where their gates are locked on; a cluster may
// turn a gate off while it is beta, and then the apiserver silently drops
// the field on create and validates Job status the old way.
var jobFields = []jobField{
	{
		path: "spec.managedBy", gate: "JobManagedBy", defaultOn: "1.32",
		why: "it is how a Job names jobkeeper as its controller: without it kube-controller-manager manages jobkeeper's Jobs too, " +
			"and with JobPodReplacementPolicy off as well the apiserver refuses the SuccessCriteriaMet condition written before Complete, so Jobs never finish",
		kept: func(j *batchv1.Job) bool { return j.Spec.ManagedBy != nil },
	},
	{
		path: "spec.podReplacementPolicy", gate: "JobPodReplacementPolicy", defaultOn: "1.29",
		why:  "Jobs that ask to replace pods only once they have failed would have it dropped and get replacements while the old pods still terminate",
		kept: func(j *batchv1.Job) bool { return j.Spec.PodReplacementPolicy != nil },
	},
	{
		path: "spec.successPolicy", gate: "JobSuccessPolicy", defaultOn: "1.31",
		why:  "Indexed Jobs with a success policy would have it dropped and run every index to the end",
		kept: func(j *batchv1.Job) bool { return j.Spec.SuccessPolicy != nil },
	},
	{
		path: "spec.backoffLimitPerIndex", gate: "JobBackoffLimitPerIndex", defaultOn: "1.29",
		why:  "Indexed Jobs with a per-index backoff limit would have it dropped and fail as a whole at backoffLimit",
		kept: func(j *batchv1.Job) bool { return j.Spec.BackoffLimitPerIndex != nil },
	},
}

// serverFacts is what the start-up check learned from the apiserver.
type serverFacts struct {
	// version is the apiserver's version (discovery's /version).
	version *apimachineryversion.Info
	// stored is the probe Job as the apiserver would store it: the answer
	// to its dry-run create.
	stored *batchv1.Job
	// workloadsMissing, when WorkloadWithJob is on, are the resources of
	// scheduling.k8s.io/v1alpha2 the Job controller reads that the
	// apiserver does not serve.
	workloadsMissing []string
}

// workloadsGroupVersion and workloadResources are the API that
// WorkloadWithJob's Job controller reads and writes.
const workloadsGroupVersion = "scheduling.k8s.io/v1alpha2"

var workloadResources = []string{"workloads", "podgroups"}

// serverProblems returns what keeps the Job controller from working on the
// apiserver of facts, one sentence each saying what is missing and how to
// get it; none if nothing is. A version it cannot parse is no problem by
// itself (vendors write odd versions); the stored probe still tells.
func serverProblems(facts serverFacts) []string {
	var problems []string
	where := "kube-apiserver"
	if v := serverVersion(facts.version); v != nil {
		where = "kube-apiserver " + facts.version.GitVersion
		if v.LessThan(MinServerVersion) {
			problems = append(problems, fmt.Sprintf("%s is older than Kubernetes %s, which jobkeeper's Job controller needs (spec.managedBy of Jobs is on by default from 1.32): "+
				"upgrade the cluster, or run only --controllers=%s", where, MinServerVersion, TTLAfterFinishedController))
		}
	}
	if len(facts.workloadsMissing) > 0 {
		problems = append(problems, fmt.Sprintf("%s does not serve %s %s, which the Job controller's WorkloadWithJob gate (--feature-gates) needs: "+
			"turn on --feature-gates=GenericWorkload=true and --runtime-config=%s=true on kube-apiserver, or turn WorkloadWithJob off",
			where, workloadsGroupVersion, strings.Join(facts.workloadsMissing, " and "), workloadsGroupVersion))
	}
	if facts.stored == nil {
		return problems
	}
	for _, f := range jobFields {
		if f.kept(facts.stored) {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s drops %s from Jobs, so its feature gate %s is off (on by default since %s); %s: "+
			"turn it on with --feature-gates=%s=true on kube-apiserver and kube-controller-manager",
			where, f.path, f.gate, f.defaultOn, f.why, f.gate))
	}
	return problems
}

// serverVersion parses info's version, nil if it cannot.
func serverVersion(info *apimachineryversion.Info) *utilversion.Version {
	if info == nil {
		return nil
	}
	if v, err := utilversion.ParseGeneric(info.GitVersion); err == nil && v.Major() > 0 {
		return v
	}
	// Some vendors report only major and minor, the minor with a "+".
	if v, err := utilversion.ParseGeneric(info.Major + "." + strings.TrimSuffix(info.Minor, "+")); err == nil && v.Major() > 0 {
		return v
	}
	return nil
}

// probeJob is the Job the start-up check dry-run creates in namespace: one
// that sets every field of jobFields, valid as it stands.
func probeJob(namespace, managedBy string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "jobkeeper-server-check-", Namespace: namespace},
		Spec: batchv1.JobSpec{
			ManagedBy:            ptr.To(managedBy),
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			Completions:          ptr.To[int32](1),
			Parallelism:          ptr.To[int32](1),
			BackoffLimitPerIndex: ptr.To[int32](1),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			SuccessPolicy: &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
				{SucceededIndexes: ptr.To("0")},
			}},
			// Restricted, so that a namespace that enforces or warns
			// about the restricted Pod Security Standard (the chart's)
			// has nothing to say.
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr.To(true),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Containers: []corev1.Container{{
					Name:  "check",
					Image: "jobkeeper.dev/server-check",
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false),
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
			}},
		},
	}
}

// checkServer checks that the Job controller can work on the apiserver of
// client: its version (MinServerVersion or later) and the fields of
// jobFields, by a server-side dry-run create of probeJob in namespace (no
// object is stored, nothing runs; it needs create on Jobs there). Errors
// that may pass are retried with serverCheckBackoff; what remains is
// returned as one error that says what is missing and how to fix it.
func checkServer(ctx context.Context, client kubernetes.Interface, namespace, managedBy string, backoff wait.Backoff) error {
	logger := klog.FromContext(ctx)
	var facts serverFacts
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		facts, last = readServerFacts(ctx, client, namespace, managedBy)
		if last != nil && mayPass(last) {
			logger.Info("Checking the apiserver failed, retrying", "err", last)
			return false, nil
		}
		return true, last
	})
	if err != nil {
		if last == nil || !mayPass(last) {
			last = err
		}
		return fmt.Errorf("checking the apiserver before starting the Job controller: %w (--server-check=false skips the check)", last)
	}
	if problems := serverProblems(facts); len(problems) > 0 {
		return fmt.Errorf("the apiserver lacks what jobkeeper's Job controller needs (docs/deploy.md, Requirements): %s "+
			"(--server-check=false starts it anyway)", strings.Join(problems, "; "))
	}
	logger.Info("The apiserver has what the Job controller needs", "version", facts.version.GitVersion)
	return nil
}

// readServerFacts asks the apiserver for its version and dry-run creates the
// probe Job.
func readServerFacts(ctx context.Context, client kubernetes.Interface, namespace, managedBy string) (serverFacts, error) {
	var facts serverFacts
	var err error
	if facts.version, err = client.Discovery().ServerVersion(); err != nil {
		return facts, fmt.Errorf("reading the server version: %w", err)
	}
	facts.stored, err = client.BatchV1().Jobs(namespace).Create(ctx, probeJob(namespace, managedBy),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: serverCheckFieldManager})
	if apierrors.IsForbidden(err) {
		return facts, fmt.Errorf("a dry-run create of a Job in namespace %s (it stores nothing) was refused: %w; "+
			"grant create on batch/jobs in %[1]s (the Helm chart does), or set the namespace with --leader-elect-resource-namespace", namespace, err)
	}
	if err != nil {
		return facts, fmt.Errorf("dry-run create of a Job in namespace %s: %w", namespace, err)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.WorkloadWithJob) {
		served := map[string]bool{}
		list, err := client.Discovery().ServerResourcesForGroupVersion(workloadsGroupVersion)
		if err != nil && !apierrors.IsNotFound(err) {
			return facts, fmt.Errorf("reading the resources of %s: %w", workloadsGroupVersion, err)
		}
		if list != nil {
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
		}
		for _, r := range workloadResources {
			if !served[r] {
				facts.workloadsMissing = append(facts.workloadsMissing, r)
			}
		}
	}
	return facts, nil
}

// mayPass reports whether err may go away by itself: no answer from the
// apiserver, or an answer that says it is busy or failing.
func mayPass(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || status.Status().Code >= 500
}
