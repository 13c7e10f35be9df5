package serviceproxy

import (
	"context"
	"errors"
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

	// A change that changes no rule writes nothing.
	web.Labels = map[string]string{"touched": "yes"}
	if _, err := client.CoreV1().Services("ns").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
	if _, err := client.CoreV1().ConfigMaps("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service is gone: its rule goes.
	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write without the Service", func() bool { return w.count() >= 3 })
	if w.count() != 3 {
		t.Errorf("%d writes, want 3: a label change is no change of the rules", w.count())
	}
	if got := w.last(); len(got) != 0 {
		t.Errorf("rules %+v after the Service left, want none", got)
	}
	cancel()
	<-done
}
