"""Running images elsewhere: Kubernetes manifests (a smoke Job among them) and the CI matrix."""
