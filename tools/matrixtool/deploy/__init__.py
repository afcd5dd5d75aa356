"""Running images elsewhere: Kubernetes manifests and the CI matrix."""
