//go:build tools

// The Kubernetes programs that tests/e2e/cluster.sh runs, built from the k8s.io/kubernetes
// module at the version go.mod pins (its staging modules pinned to the matching v0.x by replace
// lines, as Kubernetes' own go.mod does). Nothing imports this package; it keeps go mod tidy
// from dropping the requirements.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
