"""The operator process: watches feed rate-limited work queues; the Lease holder reconciles.

Above `towline.handlers` in the layers: the runtime (the `Operator`, the manager)
builds each reconciler's dependencies (towline.handlers.context) once and hands
them in; handlers never import the runtime.
"""
