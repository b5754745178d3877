"""The operator process: watches feed rate-limited work queues; the Lease holder reconciles.

Above `towline.handlers` in the layers: the runtime implements the handlers'
`ReconcileContext` and hands itself in; handlers never import the runtime.
"""
