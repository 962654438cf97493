//go:build tools

// etcd for tests/e2e/cluster.sh, built from its server module (the etcd program's main package).
package tools

import _ "go.etcd.io/etcd/server/v3"
