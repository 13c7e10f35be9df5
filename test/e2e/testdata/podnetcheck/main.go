// Command podnetcheck is the program of the pod network test
// (test/e2e/podnetwork_test.go), a pod of an Indexed Job behind a headless
// Service, as distributed training runs: it listens on -port, answering
// each connection with its completion index, then reaches every pod of the
// Job, itself included, by its DNS name <job>-<index>.<service> on that
// port (retrying while the others start), prints what each answered, and
// exits once every pod has reached it, or fails after -timeout. With
// -leader it also reaches that Service by name, which leads to index 0.
//
// With -serve it only serves: each connection on -port is answered with
// the pod's hostname, until it is stopped (a Deployment's or a
// StatefulSet's pods). With -ask it only asks: it reaches each of the
// comma-separated names on -port, retrying until -timeout, and prints what
// each answered.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	job := flag.String("job", "", "the Job's name")
	service := flag.String("service", "", "the headless Service's name (the pods' subdomain)")
	n := flag.Int("n", 0, "the Job's completions")
	port := flag.Int("port", 29500, "the port every pod listens on")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long the whole check may take")
	leader := flag.String("leader", "", "a ClusterIP Service's name that leads to index 0 alone, also reached on -port")
	serveOnly := flag.Bool("serve", false, "only answer connections on -port with the hostname, for ever")
	askOnly := flag.String("ask", "", "only reach these comma-separated names on -port and print their answers")
	flag.Parse()
	if *serveOnly {
		serve(*port)
	}
	if *askOnly != "" {
		askAll(strings.Split(*askOnly, ","), *port, time.Now().Add(*timeout))
		return
	}
	index := os.Getenv("JOB_COMPLETION_INDEX")
	deadline := time.Now().Add(*timeout)

	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		fail("listening: %v", err)
	}
	var served atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, index)
			_ = c.Close()
			served.Add(1)
		}
	}()

	names := []string{}
	for i := range *n {
		names = append(names, fmt.Sprintf("%s-%d.%s", *job, i, *service))
	}
	if *leader != "" {
		names = append(names, *leader)
	}
	for _, name := range names {
		addr := net.JoinHostPort(name, strconv.Itoa(*port))
		for {
			answer, from, err := ask(addr)
			if err == nil {
				fmt.Printf("index %s reached %s at %s: it answered %s\n", index, name, from, answer)
				break
			}
			if time.Now().After(deadline) {
				fail("index %s could not reach %s: %v", index, addr, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	// Every pod reaches each pod once by name, and index 0 once more
	// through the leader Service.
	want := int32(*n)
	if *leader != "" && index == "0" {
		want *= 2
	}
	for served.Load() < want {
		if time.Now().After(deadline) {
			fail("index %s was reached %d times, want %d", index, served.Load(), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("index %s was reached by all %d pods\n", index, *n)
}

// serve answers each connection on port with the hostname, for ever.
func serve(port int) {
	name, _ := os.Hostname()
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		fail("listening: %v", err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fail("accepting: %v", err)
		}
		_, _ = io.WriteString(c, name)
		_ = c.Close()
	}
}

// askAll reaches each name on port and prints what it answered.
func askAll(names []string, port int, deadline time.Time) {
	for _, name := range names {
		addr := net.JoinHostPort(name, strconv.Itoa(port))
		for {
			answer, from, err := ask(addr)
			if err == nil {
				fmt.Printf("reached %s at %s: it answered %s\n", name, from, answer)
				break
			}
			if time.Now().After(deadline) {
				fail("could not reach %s: %v", addr, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// ask connects to addr and returns what the other side wrote and its
// address.
func ask(addr string) (string, string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return "", "", err
	}
	return string(b), c.RemoteAddr().String(), nil
}

func fail(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
	os.Exit(1)
}
