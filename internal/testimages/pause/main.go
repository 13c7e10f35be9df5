// Command pause is jobkeeper's stand-in for the pause program of
// registry.k8s.io/pause (kubernetes/build/pause/linux/pause.c): it sleeps
// until SIGINT or SIGTERM, then exits 0, reaping any child that dies in the
// meantime (as PID 1 of a pod's PID namespace it inherits orphans). Built
// static (CGO_ENABLED=0) by testimages.BuildPause so that it runs in an image
// holding nothing else.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is printed by -v, as the real pause prints its own.
const version = "jobkeeper-testimages-pause"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.c", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
