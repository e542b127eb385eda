// Package gatewayapi only holds the sigs.k8s.io/gateway-api requirement of
// go.mod (so `go mod tidy` keeps it and go.sum stays complete); it is never
// built into a binary. The CRDs are YAML files of that module.
package gatewayapi

import _ "sigs.k8s.io/gateway-api/pkg/consts"
