package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// servicePolicyName names the ValidatingAdmissionPolicy, and its binding,
// that warns whoever creates a Service that `up` does not route it.
const servicePolicyName = "jobkeeper-up-unrouted-services"

// serviceWarning is the warning a client (kubectl prints it as "Warning:
// ...") gets when it creates a Service under `up`.
const serviceWarning = "jobkeeper up does not route Services: no proxy, DNS or endpoints serve this Service's " +
	"cluster IP or name. Pods share this host's network: reach a pod at 127.0.0.1:<containerPort>, " +
	"or use kubectl port-forward. See " + upDocs + "."

// servicePolicy returns the policy that warns of every Service created, but
// the apiserver's own (the kubernetes Service in default, which the
// apiserver itself serves and creates again when it is deleted).
func servicePolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	fail := admissionregistrationv1.Fail
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: servicePolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: onCreate(corev1.GroupName, "v1", "services"),
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "not-the-apiservers-own",
				Expression: `!(request.namespace == "default" && request.name == "kubernetes")`,
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "false",
				Message:    serviceWarning,
			}},
		},
	}
}

// serviceBinding binds servicePolicy to every namespace, warning only: the
// Service is created.
func serviceBinding() *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return bindEverywhere(servicePolicyName, admissionregistrationv1.Warn)
}

// waitServiceWarned makes dry-run creations of a Service, with a client
// made from admin that collects the response's warnings, until one carries
// the policy's warning.
func waitServiceWarned(ctx context.Context, admin *rest.Config, timeout time.Duration) error {
	cfg := rest.CopyConfig(admin)
	warnings := &warningCollector{}
	cfg.WarningHandler = warnings
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	probe := serviceProbe()
	return waitEnforced(ctx, timeout, func() (bool, error) {
		warnings.reset()
		_, err := client.CoreV1().Services(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if warnings.contains(servicePolicyName) {
			return true, nil
		}
		if err == nil {
			err = errors.New("a dry-run Service was created without the warning")
		}
		return false, err
	})
}

// serviceProbe is a valid Service for waitServiceWarned's dry runs.
func serviceProbe() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "jobkeeper-admission-probe", Namespace: metav1.NamespaceDefault},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "jobkeeper-admission-probe"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
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
