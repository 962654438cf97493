//go:build tools

// Prometheus for tests/e2e/checks.py, built from its module with Kubernetes service discovery:
// Debian's prometheus 2.42 is built without it ("field kubernetes_sd_configs not found in type
// config.ScrapeConfig"). build.sh keeps only that discovery (-tags remove_all_sd,
// enable_kubernetes_sd), which saves most of the build.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
