package nodeagent

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"jobkeeper.dev/jobkeeper/test/integration/framework"
)

// childEnv makes the test binary act as a container process.
const childEnv = "JOBKEEPER_IT_CHILD"

// markerEnv names the file that mode fail-once looks for.
const markerEnv = "JOBKEEPER_IT_MARKER"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		framework.Main(m)
	case "hello":
		fmt.Printf("hello from %s\n", os.Getenv("JOB_COMPLETION_INDEX"))
		os.Exit(0)
	case "fail":
		fmt.Fprintln(os.Stderr, "failing on purpose")
		os.Exit(1)
	case "fail-once":
		// As upstream's e2e "failOnce": fail unless the marker file exists,
		// creating it, so the next attempt succeeds.
		marker := os.Getenv(markerEnv)
		if _, err := os.Stat(marker); err == nil {
			fmt.Println("succeeding")
			os.Exit(0)
		}
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("failing once")
		os.Exit(1)
	case "sleep":
		fmt.Println("sleeping")
		time.Sleep(300 * time.Second)
		os.Exit(0)
	case "sleep-until-term":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("waiting for SIGTERM")
		<-c
		fmt.Println("got SIGTERM")
		os.Exit(0)
	default:
		os.Exit(99)
	}
}
