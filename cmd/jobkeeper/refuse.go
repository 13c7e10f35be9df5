package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// What `up` runs and what it refuses, as `up --help` and the refusal message
// say it; README.md, section "What up runs and what it refuses", says the same.
const (
	// upRuns lists what acts on objects under `up`.
	upRuns = "Jobs (jobkeeper's Job controller), CronJobs, TTL-after-finished cleanup, Pods (the local " +
		"node agent), namespace deletion, garbage collection of dependents, and pod garbage collection " +
		"(pods of a gone node, or stuck terminating), PersistentVolumeClaims (the default StorageClass " +
		"standard: a directory under the data directory per claim), and with --network=pod (the default as root) " +
		"ClusterIP and NodePort Services, EndpointSlices, the cluster DNS and, from the first one created, Deployments, " +
		"ReplicaSets, StatefulSets, DaemonSets, ReplicationControllers and PodDisruptionBudgets"
	// upRefuses lists the kinds `up` refuses to create, because nothing would act on them.
	upRefuses = "Deployments, ReplicaSets, StatefulSets and DaemonSets"
	// upDocs is where a refused user is sent.
	upDocs = `"jobkeeper up --help", or the section "What up runs and what it refuses" of jobkeeper's README.md`
)

// refusedResources are the apps/v1 resources whose creation `up` refuses.
var refusedResources = []string{"deployments", "replicasets", "statefulsets", "daemonsets"}

// refusePolicyName names the ValidatingAdmissionPolicy, and its binding, that
// refuses refusedResources.
const refusePolicyName = "jobkeeper-up-unsupported-workloads"

// refuseFieldManager is the field manager of the policy's writes.
const refuseFieldManager = "jobkeeper-up"

// refusalWaitTimeout bounds the wait for the policy to be enforced. A variable
// so tests can shorten it.
var refusalWaitTimeout = 10 * time.Second

// refusalMessage is the refusal's message for kind (e.g. "Deployment").
func refusalMessage(kind string) string {
	return "jobkeeper up does not run " + kind + "s without a pod network (--network=pod, as root): their pods would share this host's network. " +
		"jobkeeper up runs " + upRuns + "; it refuses " + upRefuses + ". See " + upDocs + "."
}

// refusePolicy returns the policy that refuses the creation of
// refusedResources, with a message naming the kind, what `up` runs and where
// to read more. Only creation is refused, so objects left from before (or
// created by another tool on the same data directory) can still be updated and
// deleted.
func refusePolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	forbidden := metav1.StatusReasonForbidden
	// The CEL message is the Go one with the request's kind substituted. Go's
	// quoting of these ASCII strings is also a valid CEL string literal.
	const kindMarker = "\x00KIND\x00"
	parts := strings.Split(refusalMessage(kindMarker), kindMarker)
	for i, p := range parts {
		parts[i] = strconv.Quote(p)
	}
	messageExpression := strings.Join(parts, " + request.kind.kind + ")
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: refusePolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: onCreate(appsv1.GroupName, "*", refusedResources...),
			Validations: []admissionregistrationv1.Validation{{
				Expression:        "false",
				Message:           refusalMessage("such object"),
				MessageExpression: messageExpression,
				Reason:            &forbidden,
			}},
		},
	}
}

// onCreate matches the creation of resources of group at version ("*":
// any), the only operation up's policies act on: objects that exist stay
// updatable and deletable.
func onCreate(group, version string, resources ...string) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{group},
					APIVersions: []string{version},
					Resources:   resources,
				},
			},
		}},
	}
}

// bindEverywhere binds the policy name to every namespace with action.
func bindEverywhere(name string, action admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{action},
		},
	}
}

// refuseBinding binds refusePolicy to every namespace, denying.
func refuseBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindEverywhere(refusePolicyName, admissionregistrationv1.Deny)
}

// installRefusals installs the admission policy that refuses what `up` does
// not run, and those that warn of what it accepts but does not act on
// (Services, Ingresses, NetworkPolicies: warnedKinds),
// creating or updating them (so every start leaves the current version), and
// waits until the apiserver enforces them, so that nothing created after
// "jobkeeper is up" slips through.
//
// The warnings are those of the network mode (warnedKindsFor). With pods'
// own network (--network=pod) the workloads run (runWorkloadsOnDemand):
// the refusal a --network=host start left is removed instead.
func installRefusals(network string) bootstrapFunc {
	return func(ctx context.Context, admin *rest.Config) error {
		return installRefusalsFor(ctx, admin, network != networkPod, warnedKindsFor(network))
	}
}

// installRefusalsFor is installRefusals with the workloads refused or not,
// and the warned kinds warned.
func installRefusalsFor(ctx context.Context, admin *rest.Config, refuse bool, warned []warnedKind) error {
	cfg := rest.CopyConfig(admin)
	cfg.UserAgent = refuseFieldManager
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := applyRefusals(ctx, client, refuse, warned); err != nil {
		return fmt.Errorf("installing the admission policy %s: %w", refusePolicyName, err)
	}
	if !refuse {
		if err := waitAccepted(ctx, client, refusalWaitTimeout); err != nil {
			klog.FromContext(ctx).Error(err, "Admission policy still enforced", "policy", refusePolicyName)
		}
	} else if err := waitRefused(ctx, client, refusalWaitTimeout); err != nil {
		// Not fatal: the policy is stored and will be enforced; say so in the log.
		klog.FromContext(ctx).Error(err, "Admission policy not enforced yet", "policy", refusePolicyName)
	}
	for _, k := range warned {
		if err := waitWarned(ctx, cfg, k, refusalWaitTimeout); err != nil {
			klog.FromContext(ctx).Error(err, "Admission policy not enforced yet", "policy", k.policy)
		}
	}
	return nil
}

// applyRefusals creates the refusal (or, unless refuse, deletes it) and
// the warning policies and their bindings, or updates their specs when
// they exist.
func applyRefusals(ctx context.Context, client kubernetes.Interface, refuse bool, warned []warnedKind) error {
	if !refuse {
		if err := deletePolicy(ctx, client, refusePolicyName); err != nil {
			return err
		}
	} else if err := applyPolicy(ctx, client, refusePolicy(), refuseBinding()); err != nil {
		return err
	}
	for _, k := range warned {
		if err := applyPolicy(ctx, client, warnPolicy(k), warnBinding(k)); err != nil {
			return fmt.Errorf("installing the admission policy %s: %w", k.policy, err)
		}
	}
	return nil
}

// applyPolicy creates policy and binding, or updates their specs when they
// exist.
func applyPolicy(ctx context.Context, client kubernetes.Interface, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) error {
	policies := client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	err := createOrUpdate(func() error {
		_, err := policies.Create(ctx, policy, metav1.CreateOptions{FieldManager: refuseFieldManager})
		return err
	}, func() error {
		cur, err := policies.Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec = policy.Spec
		_, err = policies.Update(ctx, cur, metav1.UpdateOptions{FieldManager: refuseFieldManager})
		return err
	})
	if err != nil {
		return err
	}
	bindings := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	return createOrUpdate(func() error {
		_, err := bindings.Create(ctx, binding, metav1.CreateOptions{FieldManager: refuseFieldManager})
		return err
	}, func() error {
		cur, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec = binding.Spec
		_, err = bindings.Update(ctx, cur, metav1.UpdateOptions{FieldManager: refuseFieldManager})
		return err
	})
}

// deletePolicy deletes the policy name and its binding, if they exist.
func deletePolicy(ctx context.Context, client kubernetes.Interface, name string) error {
	err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// waitAccepted makes dry-run creations of a Deployment until one is
// accepted: a refusal policy just deleted is no longer enforced.
func waitAccepted(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	probe := refusalProbe()
	return waitEnforced(ctx, timeout, func() (bool, error) {
		_, err := client.AppsV1().Deployments(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, err
	})
}

// createOrUpdate calls create, then update when the object already exists,
// and starts again when the update lost a race (a conflict).
func createOrUpdate(create, update func() error) error {
	for {
		err := create()
		if apierrors.IsAlreadyExists(err) {
			err = update()
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// waitRefused makes dry-run creations of a Deployment until the policy
// refuses one. A dry run goes through admission and stores nothing.
func waitRefused(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	probe := refusalProbe()
	return waitEnforced(ctx, timeout, func() (bool, error) {
		_, err := client.AppsV1().Deployments(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), refusePolicyName) {
			return true, nil
		}
		if err == nil {
			err = errors.New("a dry-run Deployment was still accepted")
		}
		return false, err
	})
}

// waitEnforced calls try every 20ms until it reports the policy enforced,
// ctx ends, or timeout passes; then the error is try's last one.
func waitEnforced(ctx context.Context, timeout time.Duration, try func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := try()
		switch {
		case done:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("not enforced within %s: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refusalProbe is a valid Deployment for waitRefused's dry runs.
func refusalProbe() *appsv1.Deployment {
	labels := map[string]string{"app": "jobkeeper-admission-probe"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "jobkeeper-admission-probe", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
}
