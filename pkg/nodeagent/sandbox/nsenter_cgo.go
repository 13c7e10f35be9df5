//go:build cgo && linux

package sandbox

// A command exec'd into a container with a user namespace must run in that
// namespace, the one its main process is in, or it could not reach the
// main process's /proc files, trace it or debug it (the kernel lets only
// a process of the same namespace, or one with CAP_SYS_PTRACE over it, do
// so). A process of a multithreaded program, as every Go program is once
// its runtime runs, cannot enter a user namespace: the exec'd command's
// init stage enters it in this constructor, which runs before the Go
// runtime starts any thread, as runc's nsexec does.

/*
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

// The stage's environment names the descriptor of the namespace to enter.
#define JOIN_ENV "_JOBKEEPER_SANDBOX_USERNS_FD"

__attribute__((constructor)) static void jobkeeper_enter_userns(void) {
	const char *v = getenv(JOIN_ENV);
	if (v == NULL) {
		return;
	}
	// Not traceable, nor its /proc entries readable, by the container's
	// processes once it is in their namespace.
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	char *end = NULL;
	long fd = strtol(v, &end, 10);
	if (end == v || *end != '\0' || fd < 0 || setns((int)fd, CLONE_NEWUSER) != 0) {
		// The sandbox reads no ready byte and reports the failure
		// (enterFailedCode); the command's stderr says why.
		const char *msg = "jobkeeper: the command's init stage could not enter the container's user namespace\n";
		ssize_t ignored = write(2, msg, strlen(msg));
		(void)ignored;
		_exit(126);
	}
	close((int)fd);
	unsetenv(JOIN_ENV);
}
*/
import "C"

// canEnterUserNamespace says that this build enters an exec'd command's
// stage into the container's user namespace (nsenter_cgo.go).
const canEnterUserNamespace = true
