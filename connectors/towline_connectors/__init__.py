"""Towline connectors: the step side. Never imports kopf, a Kubernetes client or `towline`.

Two libraries are imported through modules of their own, which keep their command-line front ends out of every
process: `cel` through `towline_connectors.cellib`, `httpx` through `towline_connectors.httpxlib`.
"""
