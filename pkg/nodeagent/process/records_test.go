package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestKillStaleSparesAnUnreadableRecord: a record whose start time cannot
// be read (the agent was killed while writing it) names a PID that may have
// been given to another program since; that program's session is not
// killed, by killStale nor by KillRecorded (jobkeeper reset).
func TestKillStaleSparesAnUnreadableRecord(t *testing.T) {
	for _, content := range []string{"", "ns/p/c\n"} {
		cmd := exec.Command("sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(cmd.Process.Pid)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if n := KillRecorded(ReadRecorded(dir)); n != 0 {
			t.Errorf("record %q: KillRecorded killed %d processes of an unrelated session", content, n)
		}
		killStale(context.Background(), dir)
		// A SIGKILL sent before dooms the process at once: it ends by
		// SIGTERM only if nothing killed it.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
			t.Errorf("record %q: the unrelated session's leader ended by %v, want the test's SIGTERM", content, ws.Signal())
		}
	}
}
