"""Chaos: runs whose steps call an idempotent HTTP sink while operator replicas are killed and
paused and the API server and etcd restart; then every run must have finished, no step attempt
may have had two Jobs, and no step's change may have been applied twice.

`python -m tests.chaos` (`make chaos`) is the full form (100 runs) and prints the counts;
`tests/integration/test_chaos.py` is the short form `make test` runs and asserts on.
"""
