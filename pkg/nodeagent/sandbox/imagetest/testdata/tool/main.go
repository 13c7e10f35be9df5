// Command tool is the one program of the test images of package imagetest.
// Each argument is a step, run in order, each printing one line:
//
//	cat:PATH          the file's content
//	absent:PATH       "absent PATH" or "present PATH"
//	write:PATH=TEXT   writes TEXT to PATH ("wrote PATH" or the error)
//	id                "uid=U gid=G groups=[...]"
//	stat:PATH         "PATH uid=U gid=G" of the file (links not followed)
//	chmod:PATH=MODE   changes the file's mode (octal); prints nothing
//	pwd               the working directory
//	hostname          the node name uname(2) gives (uname -n)
//	env:NAME          NAME=value
//	wait:PATH         waits up to 30 seconds for PATH to exist ("found PATH")
//	sleep             sleeps for an hour
//	exit:N            exits with code N
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	for _, step := range os.Args[1:] {
		op, arg, _ := strings.Cut(step, ":")
		switch op {
		case "cat":
			b, err := os.ReadFile(arg)
			if err != nil {
				fmt.Println("error:", err)
				continue
			}
			fmt.Println(strings.TrimRight(string(b), "\n"))
		case "absent":
			if _, err := os.Lstat(arg); errors.Is(err, os.ErrNotExist) {
				fmt.Println("absent", arg)
			} else {
				fmt.Println("present", arg)
			}
		case "write":
			p, text, _ := strings.Cut(arg, "=")
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				fmt.Println("error:", err)
			} else {
				fmt.Println("wrote", p)
			}
		case "id":
			groups, _ := os.Getgroups()
			fmt.Printf("uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), groups)
		case "stat":
			var st syscall.Stat_t
			if err := syscall.Lstat(arg, &st); err != nil {
				fmt.Println("error:", err)
				continue
			}
			fmt.Printf("%s uid=%d gid=%d\n", arg, st.Uid, st.Gid)
		case "chmod":
			p, mode, _ := strings.Cut(arg, "=")
			m, err := strconv.ParseUint(mode, 8, 32)
			if err == nil {
				err = os.Chmod(p, os.FileMode(m))
			}
			if err != nil {
				fmt.Println("error:", err)
			}
		case "pwd":
			wd, _ := os.Getwd()
			fmt.Println(wd)
		case "hostname":
			var u syscall.Utsname
			if err := syscall.Uname(&u); err != nil {
				fmt.Println("error:", err)
				continue
			}
			var b []byte
			for _, c := range u.Nodename {
				if c == 0 {
					break
				}
				b = append(b, byte(c))
			}
			fmt.Println(string(b))
		case "env":
			fmt.Printf("%s=%s\n", arg, os.Getenv(arg))
		case "wait":
			for i := 0; i < 3000; i++ {
				if _, err := os.Lstat(arg); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Println("found", arg)
		case "sleep":
			time.Sleep(time.Hour)
		case "exit":
			n, _ := strconv.Atoi(arg)
			os.Exit(n)
		default:
			fmt.Println("unknown step", step)
			os.Exit(99)
		}
	}
}
