// freeport prints N free TCP ports on 127.0.0.1, one a line, for
// scripts/control-plane.sh: the kernel picks each (bind to port 0), and all
// N are held open together so they differ, then released for the caller to
// bind. None of the control plane's ports is fixed: a real kubelet or
// another test run may hold the well-known ones.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	n := 1
	if len(os.Args) > 1 {
		var err error
		if n, err = strconv.Atoi(os.Args[1]); err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "usage: freeport [N]")
			os.Exit(2)
		}
	}
	listeners := make([]net.Listener, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
		listeners = append(listeners, l)
	}
	for _, l := range listeners {
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
}
