"""Automatic binding: a cascade, an architecture and a workload -> a mapping file.

Before planning: the binder writes the mapping a user would otherwise write by hand
(`mappings/*.yaml`); the pipeline then plans, times and prices it like any other.
`python -m simulator.bind` writes it to a file; `--mapping auto` uses it directly.
"""
