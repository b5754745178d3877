"""Towline connectors: the step side. Never imports kopf, a Kubernetes client or `towline`."""
