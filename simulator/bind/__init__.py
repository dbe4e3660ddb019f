"""`python -m simulator.bind`: the mapping the mapper finds, written as a mapping file.

A command-line tool: the search itself is :mod:`simulator.mapper` (over the templates of
:mod:`simulator.strategies`); this package only parses the command line and writes the file.
"""
