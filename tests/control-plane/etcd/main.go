// etcd, built from the go.etcd.io/etcd/server/v3 module at the version go.mod
// pins (the one Kubernetes v1.36 names). Its own main lives in the root etcd
// module; etcdmain.Main is all it does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
