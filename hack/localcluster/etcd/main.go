// Command etcd is etcd's own entry point, built from the Go module proxy so
// tests can run a real etcd behind the real kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
