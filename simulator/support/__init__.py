"""Helpers every layer may use, importing nothing of the pipeline: the single error type
(:mod:`~simulator.support.errors`), quantities (`1M`, `16MiB`), where the shipped specs
are, atomic writes, the command-line guard, progress bars, text tables, a sweep's journal,
and headless figures.
"""
