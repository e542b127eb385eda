// The Gateway API CRDs the real control plane installs
// (docs/control-plane.md#the-gateway-api). A module of its own, not a
// requirement of ../go.mod: sigs.k8s.io/gateway-api v1.6.3 requires newer
// k8s.io/kube-openapi, structured-merge-diff, golang.org/x/net and others
// than k8s.io/kubernetes v1.36.3 does, and minimal version selection would
// build the API server with those. Nothing here is compiled into a binary:
// scripts/control-plane.sh copies config/crd/standard/*.yaml from this
// module's download.
module kubegate.test/control-plane/gateway-api

go 1.26.0

require sigs.k8s.io/gateway-api v1.6.3
