//go:build tools

// Package tools pins the etcd server that scripts/tools.sh builds.
package tools

import _ "go.etcd.io/etcd/server/v3"
