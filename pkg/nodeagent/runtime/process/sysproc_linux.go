package process

import "syscall"

// sysProcAttr puts the process in its own group and kills it if the agent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
