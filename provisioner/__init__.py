"""provisioner: take racks of GPU servers from bare metal to a GPU Kubernetes cluster."""

__version__ = "0.1.0"
