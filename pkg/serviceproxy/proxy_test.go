package serviceproxy

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// writes records what the Proxy writes.
type writes struct {
	mu    sync.Mutex
	all   [][]Rule
	fails int
}

func (w *writes) apply(_ netns.NsHandle, rules []Rule) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fails > 0 {
		w.fails--
		return errors.New("netlink: try again")
	}
	w.all = append(w.all, rules)
	return nil
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.all)
}

func (w *writes) last() []Rule {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all[len(w.all)-1]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s never happened", what)
	}
}

func TestProxyFollowsChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web := service("web", "10.0.0.20", corev1.ServicePort{Name: "http", Port: 80})
	kubernetes := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	client := fake.NewClientset(web, kubernetes)
	factory := informers.NewSharedInformerFactory(client, 0)
	w := &writes{fails: 2}
	p, err := New(netns.None(), factory.Core().V1().Services().Informer(), factory.Discovery().V1().EndpointSlices().Informer(),
		func(s *corev1.Service) bool { return s.Namespace == "default" && s.Name == "kubernetes" })
	if err != nil {
		t.Fatal(err)
	}
	p.apply = w.apply
	p.clear = func(netns.NsHandle, []Rule, []Rule) error { return nil }
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()

	// Two writes fail: the third try writes.
	waitFor(t, "the first write", func() bool { return w.count() == 1 })
	if got := w.last(); len(got) != 1 || got[0].Service != "ns/web:http" || len(got[0].Endpoints) != 0 {
		t.Fatalf("first rules %+v, want web without endpoints (kubernetes skipped)", got)
	}

	s := slice("web", "web-1", []discoveryv1.EndpointPort{slicePortOf("http", corev1.ProtocolTCP, 8080)}, endpoint("10.244.0.2", true, true, false))
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write of the new endpoint", func() bool { return w.count() == 2 })
	if got := w.last(); len(got[0].Endpoints) != 1 || got[0].Endpoints[0].String() != "10.244.0.2:8080" {
		t.Fatalf("rules %+v, want the endpoint", got)
	}

	// The Service is gone: its rule goes.
	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write without the Service", func() bool { return w.count() == 3 })
	if got := w.last(); len(got) != 0 {
		t.Errorf("rules %+v after the Service left, want none", got)
	}
	cancel()
	<-done
}

// TestProxySyncWritesOnlyChanges: a sync whose rules are the table's
// writes nothing, the empty table included; a change writes it again.
func TestProxySyncWritesOnlyChanges(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	services, slices := factory.Core().V1().Services().Informer(), factory.Discovery().V1().EndpointSlices().Informer()
	p, err := New(netns.None(), services, slices, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &writes{}
	var cleared [][2][]Rule
	p.apply = w.apply
	p.clear = func(_ netns.NsHandle, before, after []Rule) error {
		cleared = append(cleared, [2][]Rule{before, after})
		return nil
	}
	sync := func() {
		t.Helper()
		if err := p.sync(); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	sync()
	if w.count() != 1 {
		t.Fatalf("%d writes of an empty table synced twice, want 1", w.count())
	}
	web := service("web", "10.0.0.20", corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	if err := services.GetStore().Add(web); err != nil {
		t.Fatal(err)
	}
	s := slice("web", "web-1", []discoveryv1.EndpointPort{slicePortOf("dns", corev1.ProtocolUDP, 5353)},
		endpoint("10.244.0.2", true, true, false), endpoint("10.244.0.3", true, true, false))
	if err := slices.GetStore().Add(s); err != nil {
		t.Fatal(err)
	}
	sync()
	touched := web.DeepCopy()
	touched.Labels = map[string]string{"touched": "yes"}
	if err := services.GetStore().Update(touched); err != nil {
		t.Fatal(err)
	}
	sync()
	if w.count() != 2 {
		t.Fatalf("%d writes, want 2: a label is no change of the rules", w.count())
	}
	// An endpoint leaves: written again, and its flows cleared.
	s = s.DeepCopy()
	s.Endpoints = s.Endpoints[1:]
	if err := slices.GetStore().Update(s); err != nil {
		t.Fatal(err)
	}
	sync()
	if w.count() != 3 {
		t.Fatalf("%d writes after an endpoint left, want 3", w.count())
	}
	last := cleared[len(cleared)-1]
	if len(last[0]) != 1 || len(last[0][0].Endpoints) != 2 || len(last[1][0].Endpoints) != 1 {
		t.Errorf("the flows cleared were asked with %+v", last)
	}
}

// TestEqualRules: any difference in a rule, its affinity or node port
// alone, is a change to write.
func TestEqualRules(t *testing.T) {
	base := Rule{Service: "ns/s:", Address: netip.MustParseAddrPort("10.0.0.9:80"), Protocol: corev1.ProtocolTCP,
		Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.244.0.2:8080")}}
	if !equalRules([]Rule{base}, []Rule{base}) {
		t.Error("a rule differs from itself")
	}
	for name, change := range map[string]func(*Rule){
		"affinity":  func(r *Rule) { r.Affinity = time.Hour },
		"node port": func(r *Rule) { r.NodePort = 30080 },
		"endpoints": func(r *Rule) { r.Endpoints = nil },
	} {
		changed := base
		change(&changed)
		if equalRules([]Rule{base}, []Rule{changed}) {
			t.Errorf("a rule whose %s changed is equal to the old one", name)
		}
	}
}
