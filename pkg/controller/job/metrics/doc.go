// Package metrics defines the Prometheus collectors of the Job controller.
// Names, help texts and labels match kube-controller-manager's
// job_controller_* metrics so that dashboards and alerts written for upstream
// keep working. Label values are exported constants.
package metrics
