// Package e2e tests the built jobkeeper binary as users run it: TestMain
// builds it once, and each test starts it as a child process, talks to it
// with client-go, signals it and checks its exit.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the path of the jobkeeper binary built by TestMain, and
// leanBinary that of jobkeeper-controller, the image's lean build of
// `jobkeeper controller`.
var binary, leanBinary string

func TestMain(m *testing.M) {
	if mode := os.Getenv(podModeEnv); mode != "" {
		servePodMode(mode)
	}
	dir, err := os.MkdirTemp("", "jobkeeper-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "jobkeeper")
	leanBinary = filepath.Join(dir, "jobkeeper-controller")
	build := func(out, pkg string) {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
			os.Exit(1)
		}
	}
	if env := os.Getenv("JOBKEEPER_BINARY"); env != "" {
		binary = env
	} else {
		build(binary, "jobkeeper.dev/jobkeeper/cmd/jobkeeper")
	}
	if env := os.Getenv("JOBKEEPER_CONTROLLER_BINARY"); env != "" {
		leanBinary = env
	} else {
		build(leanBinary, "jobkeeper.dev/jobkeeper/cmd/jobkeeper-controller")
	}
	code := m.Run()
	stopInProcessControlPlane(code != 0)
	os.RemoveAll(dir)
	os.Exit(code)
}
