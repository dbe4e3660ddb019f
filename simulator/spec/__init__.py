"""Spec readers shared by cascades, architectures and mappings: safe YAML with positions,
a restricted arithmetic evaluator."""
