// Command nnp is jobkeeper's stand-in for the program of upstream's
// nonewprivs e2e image (kubernetes/test/images/nonewprivs): it prints the
// effective user ID it runs with, "Effective uid: N". The image installs it
// set-user-ID root, so that it prints 0 when the container may gain
// privileges (allowPrivilegeEscalation not false) and the container's own
// user otherwise (no_new_privs makes the kernel ignore the set-user-ID bit).
// Built static (CGO_ENABLED=0) by testimages.BuildNNP.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
