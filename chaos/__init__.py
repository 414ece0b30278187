"""The reliability suite: real servers and worker processes, injected faults, invariants.

python -m chaos --size ci|full|load     # `make chaos`; a reduced size runs in `make test`
"""
