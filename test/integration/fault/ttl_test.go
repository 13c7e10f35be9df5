package fault

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"jobkeeper.dev/jobkeeper/test/builder"
	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// TestTTLDeletion runs the TTL-after-finished controller under all faults
// with kills, over finished Jobs whose TTLs expire at staggered moments, and
// checks that every Job is deleted and none before its finish time plus its
// TTL. Deletion times are the apiserver's deletionTimestamp of each Job (the
// controller deletes in the foreground, so the Job is seen with it).
func TestTTLDeletion(t *testing.T) {
	const jobs = 40
	seed := suiteSeed(t)
	ns := framework.CreateNamespace(t)
	c := framework.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Watch the Jobs directly, to record each one's deletionTimestamp.
	w, err := c.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	deletedAt := map[types.UID]time.Time{}
	go func() {
		for ev := range w.ResultChan() {
			j, ok := ev.Object.(*batchv1.Job)
			if !ok || (ev.Type != watch.Modified && ev.Type != watch.Deleted) || j.DeletionTimestamp == nil {
				continue
			}
			mu.Lock()
			if _, seen := deletedAt[j.UID]; !seen {
				deletedAt[j.UID] = j.DeletionTimestamp.Time
			}
			mu.Unlock()
		}
	}()

	r := newRig(t, seed, "ttl-after-finished")
	r.proxy.Set(allFaults)
	rng := rand.New(rand.NewSource(seed))
	expiry := map[types.UID]time.Time{}
	names := map[types.UID]string{}
	for i := 0; i < jobs; i++ {
		ttl := int32(1 + rng.Intn(4))
		job := builder.MakeJob(fmt.Sprintf("ttl-%d", i), ns).ManagedBy("example.com/not-a-controller").TTLSecondsAfterFinished(ttl).Obj()
		created, err := c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		created.Status = builder.SucceededStatus(now, now)
		finished, err := c.BatchV1().Jobs(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The controller sees the finish time at the API's one-second
		// precision; so does the check.
		at := finished.Status.Conditions[len(finished.Status.Conditions)-1].LastTransitionTime.Time
		expiry[finished.UID] = at.Add(time.Duration(ttl) * time.Second)
		names[finished.UID] = finished.Name
		time.Sleep(time.Duration(rng.Intn(100)) * time.Millisecond)
	}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		r.chaos(chaosCtx, rand.New(rand.NewSource(seed+3)), 5, 500*time.Millisecond, 2500*time.Millisecond)
	}()
	framework.WaitForWithin(t, scenarioTimeout, "every Job deleted", func(ctx context.Context) (bool, error) {
		list, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	stopChaos()
	<-chaosDone
	t.Logf("%d Jobs deleted; controller killed %d times; faults injected %v", jobs, r.killed(), r.proxy.Injected())
	mu.Lock()
	defer mu.Unlock()
	for uid, exp := range expiry {
		at, ok := deletedAt[uid]
		switch {
		case !ok:
			t.Errorf("job %s: deletion not observed", names[uid])
		case at.Before(exp):
			t.Errorf("job %s deleted at %v, before its TTL expired at %v", names[uid], at, exp)
		}
	}
}
