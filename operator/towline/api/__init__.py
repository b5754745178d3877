"""Pydantic models of Towline's three resources: the single source of truth.

The CRDs in `crds/` are generated from these models (`make crds`). Pure data:
this package imports nothing that performs I/O.
"""
