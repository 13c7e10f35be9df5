// Package monitoring holds the tests of the monitoring add-ons the Helm chart
// ships (deploy/helm/jobkeeper/files): the alerting rules and the Grafana
// dashboard. Its Go tests check that every metric they query is one the
// binary exports, under the release's selector, and that every alert has a
// runbook in docs/operations.md and a promtool rule unit test in tests/;
// promtool.sh runs those unit tests (CI runs it from .ci/run).
package monitoring
