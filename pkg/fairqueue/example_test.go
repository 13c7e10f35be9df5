package fairqueue_test

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"jobkeeper.dev/jobkeeper/pkg/fairqueue"
)

// A Limiter in front of the token bucket a clientset would build from QPS
// and burst; requests made with a context from WithFlow take turns with
// the other flows' requests.
func ExampleLimiter() {
	l := fairqueue.New(flowcontrol.NewTokenBucketRateLimiter(100, 200), fairqueue.Options{})
	defer l.Stop()
	config := &rest.Config{Host: "https://127.0.0.1:6443", RateLimiter: l}
	_ = config // kubernetes.NewForConfig(config): every group client shares l

	ctx := fairqueue.WithFlow(context.Background(), "default/big-job")
	if err := l.Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("let through")
	// Output: let through
}
