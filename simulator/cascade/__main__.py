"""`python -m simulator.cascade`: the entry point of the cascade command line, whose code is
`simulator.cascade_cli` (a command-line layer module: `rewrite --arch` ranks candidates on a
chip through the mapper, above this package)."""

import sys

from simulator.cascade_cli import main

if __name__ == "__main__":
    sys.exit(main())
