// Command jobkeeper runs the Kubernetes Job and TTL-after-finished
// controllers, either against an existing cluster (`jobkeeper controller`) or
// inside an embedded control plane on this machine (`jobkeeper up`).
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
			err = ee.err
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "jobkeeper: %v\n", err)
		}
		os.Exit(code)
	}
}
