package simulated_test

import (
	"context"
	"fmt"

	"jobkeeper.dev/jobkeeper/pkg/nodeagent/runtime"
	"jobkeeper.dev/jobkeeper/pkg/nodeagent/simulated"
)

// ExampleRuntime_Start shows a container told by its pod's annotations to
// fail with exit code 3, at once.
func ExampleRuntime_Start() {
	rt := simulated.New(nil)
	h, err := rt.Start(context.Background(), runtime.Spec{Annotations: map[string]string{
		simulated.ExitCodeAnnotation: "3",
	}})
	if err != nil {
		panic(err)
	}
	<-h.Done()
	fmt.Println(h.Result().ExitCode, h.Result().Reason)
	// Output: 3 Error
}
