// Command jobkeeper-controller is the lean build of `jobkeeper controller`:
// the same controllers, flags and endpoints, without the embedded apiserver,
// etcd and node agent that only `jobkeeper up` uses. It is what the
// container image and the Helm chart run.
//
//	jobkeeper-controller --kubeconfig ~/.kube/config --managed-by jobkeeper.dev/job-controller
//	jobkeeper-controller version
//
// A leading "controller" argument is accepted and ignored, so that the
// arguments of `jobkeeper controller` work unchanged.
package main

import (
	"fmt"
	"os"

	"jobkeeper.dev/jobkeeper/internal/cli"
)

func main() {
	root := cli.NewControllerCommand("jobkeeper-controller")
	root.SilenceUsage, root.SilenceErrors = true, true
	cli.AddKlogFlags(root)
	root.AddCommand(cli.NewVersionCommand())
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "controller" {
		args = args[1:]
	}
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "jobkeeper-controller: %v\n", err)
		os.Exit(1)
	}
}
