// Command resolve looks up each name with Go's own resolver, which reads
// /etc/resolv.conf as libc does (search path, ndots), and prints
// "name address..." or "name error": the e2e tests' client of the
// cluster DNS (busybox's nslookup applies no search path to a name with a
// dot).
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	r := &net.Resolver{PreferGo: true}
	failed := false
	for _, name := range os.Args[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, err := r.LookupHost(ctx, name)
		cancel()
		if err != nil {
			fmt.Printf("%s error %v\n", name, err)
			failed = true
			continue
		}
		fmt.Printf("%s %s\n", name, strings.Join(addrs, " "))
	}
	if failed {
		os.Exit(1)
	}
}
