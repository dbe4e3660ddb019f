"""The cycle-level engine: waterfall programs of pipelined phases and their simulation."""
