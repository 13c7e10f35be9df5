package harness

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

func TestRequestKind(t *testing.T) {
	cases := map[string]struct {
		method, url string
		want        string
	}{
		"create pod":             {method: http.MethodPost, url: "/api/v1/namespaces/ns/pods", want: "create pods"},
		"update job status":      {method: http.MethodPut, url: "/apis/batch/v1/namespaces/ns/jobs/j/status", want: "update jobs/status"},
		"patch pod":              {method: http.MethodPatch, url: "/api/v1/namespaces/ns/pods/p", want: "patch pods"},
		"delete job":             {method: http.MethodDelete, url: "/apis/batch/v1/namespaces/ns/jobs/j", want: "delete jobs"},
		"delete collection":      {method: http.MethodDelete, url: "/api/v1/namespaces/ns/pods", want: "deletecollection pods"},
		"get job":                {method: http.MethodGet, url: "/apis/batch/v1/namespaces/ns/jobs/j", want: "get jobs"},
		"list pods all ns":       {method: http.MethodGet, url: "/api/v1/pods?limit=500", want: "list pods"},
		"watch jobs":             {method: http.MethodGet, url: "/apis/batch/v1/jobs?watch=true&sendInitialEvents=true", want: "watch jobs"},
		"watch with 1":           {method: http.MethodGet, url: "/api/v1/pods?watch=1", want: "watch pods"},
		"namespaces list":        {method: http.MethodGet, url: "/api/v1/namespaces", want: "list namespaces"},
		"namespace get":          {method: http.MethodGet, url: "/api/v1/namespaces/ns", want: "get namespaces"},
		"namespace status":       {method: http.MethodPut, url: "/api/v1/namespaces/ns/status", want: "update namespaces/status"},
		"events.k8s.io event":    {method: http.MethodPost, url: "/apis/events.k8s.io/v1/namespaces/ns/events", want: "create events"},
		"custom resource":        {method: http.MethodGet, url: "/apis/jobkeeper.dev/v1alpha1/ttlpolicies?watch=true", want: "watch ttlpolicies"},
		"core discovery":         {method: http.MethodGet, url: "/api", want: "get discovery"},
		"group discovery":        {method: http.MethodGet, url: "/apis/batch/v1", want: "get discovery"},
		"version":                {method: http.MethodGet, url: "/version", want: "get discovery"},
		"cluster-scoped created": {method: http.MethodPost, url: "/apis/rbac.authorization.k8s.io/v1/clusterroles", want: "create clusterroles"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := RequestKind(httptest.NewRequest(tc.method, tc.url, nil))
			if got != tc.want {
				t.Errorf("RequestKind(%s %s) = %q, want %q", tc.method, tc.url, got, tc.want)
			}
		})
	}
}

func TestCounterWrapAndDiff(t *testing.T) {
	c := NewCounter()
	rt := c.Wrap(roundTripperFunc(func(*http.Request) (*http.Response, error) { return &http.Response{StatusCode: 200}, nil }))
	before := c.Snapshot()
	for _, u := range []string{"/api/v1/namespaces/a/pods", "/api/v1/namespaces/b/pods"} {
		if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodPost, u, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodDelete, "/apis/batch/v1/namespaces/a/jobs/j", nil)); err != nil {
		t.Fatal(err)
	}
	got := Diff(c.Snapshot(), before)
	want := map[string]int{"create pods": 2, "delete jobs": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if Total(got) != 3 {
		t.Errorf("Total = %d, want 3", Total(got))
	}
	if s := Format(got); s != "create pods=2, delete jobs=1" {
		t.Errorf("Format = %q", s)
	}
	if c.LastAnswered("delete jobs").IsZero() {
		t.Error("LastAnswered(delete jobs) is zero after a delete")
	}
}

func TestProxyCounts(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.Method + " " + r.URL.Path))
	}))
	defer backend.Close()
	p, err := NewProxy(&rest.Config{Host: backend.URL})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	get := func() {
		resp, err := http.Get(front.URL + "/api/v1/namespaces/ns/pods/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get() // not counted: no counter yet
	c := NewCounter()
	p.Count(c)
	get()
	get()
	p.Count(nil)
	get()
	if diff := cmp.Diff(map[string]int{"get pods": 2}, c.Snapshot()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestMedianAndPercentile(t *testing.T) {
	cases := map[string]struct {
		in            []float64
		median        float64
		p50, p99, p10 float64
	}{
		"one":  {in: []float64{4}, median: 4, p50: 4, p99: 4, p10: 4},
		"odd":  {in: []float64{3, 1, 2}, median: 2, p50: 2, p99: 3, p10: 1},
		"even": {in: []float64{4, 1, 3, 2}, median: 2.5, p50: 2, p99: 4, p10: 1},
		"hundred": {in: func() []float64 {
			var xs []float64
			for i := 100; i >= 1; i-- {
				xs = append(xs, float64(i))
			}
			return xs
		}(), median: 50.5, p50: 50, p99: 99, p10: 10},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			orig := append([]float64(nil), tc.in...)
			got := []float64{Median(tc.in), Percentile(tc.in, 50), Percentile(tc.in, 99), Percentile(tc.in, 10)}
			want := []float64{tc.median, tc.p50, tc.p99, tc.p10}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("median, p50, p99, p10 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(orig, tc.in); diff != "" {
				t.Errorf("input modified (-want +got):\n%s", diff)
			}
		})
	}
	if !math.IsNaN(Median(nil)) || !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Median/Percentile of nothing should be NaN")
	}
}
