"""Rule-based rewriting of cascades: an equivalent cascade with fewer passes, found by
searching chains of algebraic rules (:mod:`.rules`), each candidate checked by the
language and numerically against the original (:mod:`.rule_search`).

`python -m simulator.cascade rewrite FILE [--target-passes N] [--allow-unstable] [-o OUT]`.
"""

from simulator.cascade.rewrite.rule_search import RewriteResult, rewrite

__all__ = ["RewriteResult", "rewrite"]
