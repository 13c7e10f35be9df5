//go:build cgo && linux

package main

// The up inside the rootless node (up_rootless.go) is started with the
// network's capabilities in its ambient and inheritable sets, which every
// program it starts would inherit (the inheritable set through a program
// with inheritable file capabilities). This constructor clears both
// before the Go runtime starts any thread, so that the capabilities stay
// with up's own threads (their permitted and effective sets, which each
// new thread copies) and nothing up starts has them: a program run by a
// non-root user gets no capability on exec without an ambient or
// inheritable one. It ends the process when it cannot. With subordinate
// ids it first waits for the parent to map them.

/*
#include <fcntl.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// mapped says whether file (/proc/self/uid_map or gid_map) maps any id.
static int mapped(const char *file) {
	char buf[64];
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return 0;
	}
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	return n > 0;
}

__attribute__((constructor)) static void jobkeeper_rootless_node_caps(void) {
	const char *v = getenv("_JOBKEEPER_ROOTLESS_NODE");
	if (v == NULL || (v[0] != '1' && v[0] != '2') || v[1] != '\0') {
		return;
	}
	if (v[0] == '2') {
		// The parent maps the user's subordinate ids with newuidmap and
		// newgidmap once this process runs: nothing may look at ids
		// before (the Go runtime does not).
		int waited = 0;
		while (!(mapped("/proc/self/uid_map") && mapped("/proc/self/gid_map"))) {
			if (waited++ > 30000) {
				const char *msg = "jobkeeper: the rootless node's user namespace was never mapped\n";
				ssize_t ignored = write(2, msg, strlen(msg));
				(void)ignored;
				_exit(1);
			}
			usleep(1000);
		}
	}
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	int ok = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0 &&
		syscall(SYS_capget, &hdr, data) == 0;
	if (ok) {
		data[0].inheritable = 0;
		data[1].inheritable = 0;
		ok = syscall(SYS_capset, &hdr, data) == 0;
	}
	if (!ok) {
		const char *msg = "jobkeeper: the rootless node's up could not clear its inheritable capabilities\n";
		ssize_t ignored = write(2, msg, strlen(msg));
		(void)ignored;
		_exit(1);
	}
}
*/
import "C"

// rootlessNodeSupported says that this build keeps the rootless node's
// capabilities from the programs it starts (the constructor above).
const rootlessNodeSupported = true
