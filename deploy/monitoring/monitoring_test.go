package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"

	"jobkeeper.dev/jobkeeper/pkg/controller/job"
	"jobkeeper.dev/jobkeeper/pkg/controller/ttlafterfinished"
	"jobkeeper.dev/jobkeeper/pkg/metrics"
)

// Paths from this package's directory.
const (
	rulesFile     = "../helm/jobkeeper/files/prometheus-rules.yaml"
	dashboardFile = "../helm/jobkeeper/files/grafana-dashboard.json"
	runbooksFile  = "../../docs/operations.md"
	testsGlob     = "tests/*.yaml"
)

// placeholder is the selector written in the rules, which the chart replaces.
const placeholder = `job="jobkeeper-metrics"`

// recordingRegisterer records the names of the metrics a controller
// registers, whether or not they have any series yet.
type recordingRegisterer struct {
	// names holds the fully-qualified metric names described so far.
	names map[string]bool
}

var _ prometheus.Registerer = (*recordingRegisterer)(nil)

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// Register implements prometheus.Registerer.
func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqNameRE.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

// MustRegister implements prometheus.Registerer.
func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

// Unregister implements prometheus.Registerer.
func (r *recordingRegisterer) Unregister(prometheus.Collector) bool { return true }

// exportedNames returns the name of every metric a jobkeeper process
// exports on /metrics with both controllers running and leader election on:
// the controllers' own collectors (recorded as they register), and what the
// process-wide registry holds once they have built their work queues and a
// leader elector exists (work queue, leader election, Go and process
// metrics). Prometheus adds "up" to every target.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec := &recordingRegisterer{names: map[string]bool{"up": true}}
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	if _, err := job.NewController(ctx, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), client, job.Options{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := ttlafterfinished.New(ctx, ttlafterfinished.Options{Registerer: rec, Recorder: record.NewFakeRecorder(1)},
		ttlafterfinished.Clients{Client: client, Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())}, factory); err != nil {
		t.Fatal(err)
	}
	if _, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "jobkeeper"},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "test"},
		},
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Name:      "jobkeeper",
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	}); err != nil {
		t.Fatal(err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		rec.names[f.GetName()] = true
	}
	return rec.names
}

// selectorRE finds the metric name and the label matchers of each selector
// of a PromQL expression (every selector here has braces).
var selectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)

// checkExpr reports the selectors of expr that query a metric the binary
// does not export, or that lack the release's selector (want).
func checkExpr(expr, want string, exported map[string]bool) []string {
	var problems []string
	selectors := selectorRE.FindAllStringSubmatch(expr, -1)
	if len(selectors) == 0 {
		return []string{"no metric selector with braces"}
	}
	for _, s := range selectors {
		name := s[1]
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exported[b] {
				base = b
			}
		}
		if !exported[base] {
			problems = append(problems, fmt.Sprintf("%s is not exported by jobkeeper", name))
		}
		if !strings.HasPrefix(s[2], want) {
			problems = append(problems, fmt.Sprintf("%s{%s} does not start with the selector %s", name, s[2], want))
		}
	}
	return problems
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

// TestRulesQueryExportedMetrics checks that every alert queries metrics the
// binary exports, only under the release's selector.
func TestRulesQueryExportedMetrics(t *testing.T) {
	exported := exportedNames(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			for _, p := range checkExpr(r.Expr, placeholder, exported) {
				t.Errorf("alert %s: %s", r.Alert, p)
			}
		}
	}
}

// TestAlertsHaveRunbooksAndTests checks that each alert has a severity, a
// summary, a runbook section in docs/operations.md that its runbook_url
// points to, and a promtool unit test in which it fires.
func TestAlertsHaveRunbooksAndTests(t *testing.T) {
	doc, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			headings[strings.TrimSpace(h)] = true
		}
	}
	fired := firedInTests(t)
	var alerts []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: no summary or description", r.Alert)
			}
			if !headings[r.Alert] {
				t.Errorf("alert %s: no section \"### %s\" in docs/operations.md", r.Alert, r.Alert)
			}
			if url, want := r.Annotations["runbook_url"], "#"+strings.ToLower(r.Alert); !strings.HasSuffix(url, want) {
				t.Errorf("alert %s: runbook_url %q does not end with the section's anchor %s", r.Alert, url, want)
			}
			if !fired[r.Alert] {
				t.Errorf("alert %s: no promtool test in %s where it fires", r.Alert, testsGlob)
			}
		}
	}
	want := []string{"JobkeeperDown", "JobkeeperNoLeader", "JobkeeperStaleTrackingFinalizers", "JobkeeperSyncErrors",
		"JobkeeperTTLBacklogGrowing", "JobkeeperWorkqueueSaturated"}
	sort.Strings(alerts)
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// firedInTests returns the alerts that some promtool unit test expects to
// fire.
func firedInTests(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(testsGlob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in %s (%v)", testsGlob, err)
	}
	fired := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf struct {
			RuleFiles []string `json:"rule_files"`
			Tests     []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(data, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(tf.RuleFiles) != 1 || filepath.Clean(filepath.Join(filepath.Dir(f), tf.RuleFiles[0])) != filepath.Clean(rulesFile) {
			t.Errorf("%s tests %v, want the chart's %s", f, tf.RuleFiles, rulesFile)
		}
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
		}
	}
	return fired
}

// dashboard is the part of the Grafana dashboard JSON the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestDashboard checks the dashboard JSON: its variables, that every panel
// queries exported metrics under $selector, and that panels neither share
// an id nor overlap.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Error("the dashboard has no uid")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type + " " + v.Query
	}
	if got, want := vars["selector"], "constant "+placeholder; got != want {
		t.Errorf("variable selector is %q, want %q (the chart replaces the placeholder)", got, want)
	}
	if got, want := vars["datasource"], "datasource prometheus"; got != want {
		t.Errorf("variable datasource is %q, want %q", got, want)
	}

	exported := exportedNames(t)
	queried := map[string]bool{}
	ids := map[int]string{}
	taken := map[[2]int]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is outside the 24-column grid: %+v", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := taken[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d, %d)", other, p.Title, x, y)
				}
				taken[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, problem := range checkExpr(tg.Expr, "$selector", exported) {
				t.Errorf("panel %q: %s", p.Title, problem)
			}
			for _, s := range selectorRE.FindAllStringSubmatch(tg.Expr, -1) {
				queried[s[1]] = true
			}
		}
	}
	// What issue 17 asks the dashboard to cover.
	for _, name := range []string{
		"job_controller_job_syncs_total", "job_controller_job_sync_duration_seconds_bucket",
		"job_controller_job_pods_creation_total", "job_controller_job_pods_finished_total",
		"job_controller_stale_tracking_finalizer_pods", "job_controller_stale_tracking_finalizer_oldest_seconds",
		"ttl_after_finished_controller_deleted_objects_total", "ttl_after_finished_controller_expired_objects_pending",
		"workqueue_depth", "workqueue_queue_duration_seconds_bucket", "leader_election_master_status",
	} {
		if !queried[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

func TestCheckExpr(t *testing.T) {
	exported := map[string]bool{"workqueue_depth": true, "workqueue_queue_duration_seconds": true}
	cases := map[string]struct {
		expr string
		want int
	}{
		"scoped":              {expr: `sum by (name) (workqueue_depth{job="jobkeeper-metrics"})`},
		"histogram suffix":    {expr: `rate(workqueue_queue_duration_seconds_bucket{job="jobkeeper-metrics", le="10"}[5m])`},
		"unknown metric":      {expr: `workqueue_dept{job="jobkeeper-metrics"}`, want: 1},
		"not scoped":          {expr: `workqueue_depth{name="job"}`, want: 1},
		"no selector at all":  {expr: `sum(workqueue_depth)`, want: 1},
		"one of two unscoped": {expr: `workqueue_depth{job="jobkeeper-metrics"} / workqueue_depth{}`, want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := checkExpr(tc.expr, placeholder, exported); len(got) != tc.want {
				t.Errorf("checkExpr(%q) = %q, want %d problems", tc.expr, got, tc.want)
			}
		})
	}
}
