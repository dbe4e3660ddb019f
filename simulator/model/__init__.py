"""Models from cascade + mapping + architecture: loop nests and reuse, the analytic
performance model (traffic, cycles, schedule, latency, utilisation)."""
