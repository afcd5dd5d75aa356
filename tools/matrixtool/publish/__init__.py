"""Publishing built images: pushes and multi-architecture manifests."""
