"""Towline: a GitOps workflow engine that lives inside Kubernetes (the control plane)."""
