package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// reachPods says how to reach a pod's port under `up`, in the warnings.
const reachPods = "Pods share this host's network: reach a pod at 127.0.0.1:<containerPort>, or use kubectl port-forward."

// warnedKind is a kind `up` accepts although nothing here acts on it: each
// creation gets a warning (kubectl prints it as "Warning: ...") from a
// ValidatingAdmissionPolicy bound with the Warn action, so manifests that
// bundle one with a Job still apply.
type warnedKind struct {
	// policy names the policy and its binding.
	policy string
	// group, version and resource are what the policy matches.
	group, version, resource string
	// kinds is the kind in the plural, as `up --help` and the README name it.
	kinds string
	// exempt, when set, is a CEL expression true for the objects that get
	// no warning.
	exempt string
	// message is the warning.
	message string
	// probe creates a valid object of the kind, in a dry run, with client.
	probe func(ctx context.Context, client kubernetes.Interface) error
}

// upWarns lists the kinds of warnedKinds, as `up --help` says them:
// "Services, Ingresses and NetworkPolicies".
func upWarns() string {
	var names []string
	for _, k := range warnedKinds {
		names = append(names, k.kinds)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// warnedKinds are the kinds whose creation is warned of.
var warnedKinds = []warnedKind{{
	policy:   "jobkeeper-up-unrouted-services",
	group:    corev1.GroupName,
	version:  "v1",
	resource: "services",
	kinds:    "Services",
	// The apiserver serves its own kubernetes Service, and creates it again
	// when it is deleted.
	exempt: `request.namespace == "default" && request.name == "kubernetes"`,
	message: "jobkeeper up does not route Services: no proxy, DNS or endpoints serve this Service's " +
		"cluster IP or name. " + reachPods + " See " + upDocs + ".",
	probe: func(ctx context.Context, client kubernetes.Interface) error {
		svc := &corev1.Service{
			ObjectMeta: probeMeta(),
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "jobkeeper-admission-probe"},
				Ports:    []corev1.ServicePort{{Port: 80}},
			},
		}
		_, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, dryRun())
		return err
	},
}, {
	policy:   "jobkeeper-up-unrouted-ingresses",
	group:    networkingv1.GroupName,
	version:  "*",
	resource: "ingresses",
	kinds:    "Ingresses",
	message: "jobkeeper up runs no Ingress controller: nothing serves this Ingress's hosts and paths. " +
		reachPods + " See " + upDocs + ".",
	probe: func(ctx context.Context, client kubernetes.Interface) error {
		ing := &networkingv1.Ingress{
			ObjectMeta: probeMeta(),
			Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "jobkeeper-admission-probe", Port: networkingv1.ServiceBackendPort{Number: 80}},
			}},
		}
		_, err := client.NetworkingV1().Ingresses(ing.Namespace).Create(ctx, ing, dryRun())
		return err
	},
}, {
	policy:   "jobkeeper-up-unenforced-networkpolicies",
	group:    networkingv1.GroupName,
	version:  "*",
	resource: "networkpolicies",
	kinds:    "NetworkPolicies",
	message: "jobkeeper up does not enforce NetworkPolicies: pods share this host's network, and all traffic " +
		"to and from them is allowed. See " + upDocs + ".",
	probe: func(ctx context.Context, client kubernetes.Interface) error {
		np := &networkingv1.NetworkPolicy{ObjectMeta: probeMeta()}
		_, err := client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, dryRun())
		return err
	},
}}

// reachPodsOwnNetwork says how to reach a pod's port under `up
// --network=pod`, in the warnings.
const reachPodsOwnNetwork = "Pods have addresses of their own: reach them from pods by a Service's name or cluster IP, or from this host at their addresses, or use kubectl port-forward."

// warnedKindsFor is warnedKinds as the network mode (--network) makes
// them: with pods' own network, ClusterIP and NodePort Services are
// routed, and only load balancers are warned of.
func warnedKindsFor(network string) []warnedKind {
	if network != networkPod {
		return warnedKinds
	}
	out := slices.Clone(warnedKinds)
	for i := range out {
		k := &out[i]
		switch k.resource {
		case "services":
			k.exempt = "(" + k.exempt + `) || object.spec.type != "LoadBalancer"`
			k.message = "jobkeeper up routes Services' cluster IPs, names and node ports, but runs no load balancer: " +
				"this Service never gets a load balancer address (its node ports work, at this node's addresses). " + reachPodsOwnNetwork + " See " + upDocs + "."
			k.probe = func(ctx context.Context, client kubernetes.Interface) error {
				svc := &corev1.Service{
					ObjectMeta: probeMeta(),
					Spec: corev1.ServiceSpec{
						Type:     corev1.ServiceTypeLoadBalancer,
						Selector: map[string]string{"app": "jobkeeper-admission-probe"},
						Ports:    []corev1.ServicePort{{Port: 80}},
					},
				}
				_, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, dryRun())
				return err
			}
		case "ingresses":
			k.message = "jobkeeper up runs no Ingress controller: nothing serves this Ingress's hosts and paths. " +
				reachPodsOwnNetwork + " See " + upDocs + "."
		case "networkpolicies":
			k.message = "jobkeeper up does not enforce NetworkPolicies: all traffic to and from pods is allowed. See " + upDocs + "."
		}
	}
	return out
}

// probeMeta names the dry-run objects that check a policy is enforced.
func probeMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: "jobkeeper-admission-probe", Namespace: metav1.NamespaceDefault}
}

// dryRun are the options of a creation that goes through admission and
// stores nothing.
func dryRun() metav1.CreateOptions {
	return metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
}

// warnPolicy returns the policy that warns of every creation of k's kind
// but the exempt ones.
func warnPolicy(k warnedKind) *admissionregistrationv1.ValidatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: k.policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: onCreate(k.group, k.version, k.resource),
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				Message:    k.message,
			}},
		},
	}
	if k.exempt != "" {
		p.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{
			Name:       "not-exempt",
			Expression: "!(" + k.exempt + ")",
		}}
	}
	return p
}

// warnBinding binds k's policy to every namespace, warning only: the object
// is created.
func warnBinding(k warnedKind) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindEverywhere(k.policy, admissionregistrationv1.Warn)
}

// waitWarned makes dry-run creations with k's probe, with a client made
// from admin that collects the response's warnings, until one carries k's
// warning.
func waitWarned(ctx context.Context, admin *rest.Config, k warnedKind, timeout time.Duration) error {
	cfg := rest.CopyConfig(admin)
	warnings := &warningCollector{}
	cfg.WarningHandler = warnings
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return waitEnforced(ctx, timeout, func() (bool, error) {
		warnings.reset()
		err := k.probe(ctx, client)
		if warnings.contains(k.policy) {
			return true, nil
		}
		if err == nil {
			err = errors.New("a dry-run " + k.resource + " creation had no warning")
		}
		return false, err
	})
}

// warningCollector is a rest.WarningHandler that keeps the warnings it is
// given.
type warningCollector struct {
	// mu guards texts.
	mu sync.Mutex
	// texts are the warnings since the last reset.
	texts []string
}

var _ rest.WarningHandler = (*warningCollector)(nil)

// HandleWarningHeader keeps the warning's text.
func (w *warningCollector) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

// reset forgets the warnings kept so far.
func (w *warningCollector) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = nil
}

// contains reports whether a kept warning contains s.
func (w *warningCollector) contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.texts {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}
