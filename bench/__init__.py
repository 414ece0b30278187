"""Benchmarks of waitstate against a raw-Temporal floor: `python -m bench --help`."""
