//go:build cgo && linux

package main

// The up inside the rootless node (up_rootless.go) is started with the
// network's capabilities in its ambient set, which every program it
// starts would inherit. This constructor clears that set before the Go
// runtime starts any thread, so that the capabilities stay with up's own
// threads (their permitted and effective sets, which each new thread
// copies) and nothing up starts has them: a program run by a non-root
// user, without file capabilities, gets no capability on exec without an
// ambient one.

/*
#include <stdlib.h>
#include <sys/prctl.h>

__attribute__((constructor)) static void jobkeeper_rootless_node_caps(void) {
	const char *v = getenv("_JOBKEEPER_ROOTLESS_NODE");
	if (v == NULL || v[0] != '1') {
		return;
	}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
}
*/
import "C"

// rootlessNodeSupported says that this build keeps the rootless node's
// capabilities from the programs it starts (the constructor above).
const rootlessNodeSupported = true
