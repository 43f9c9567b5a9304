"""Pure tensor functions for linear recurrences; each `<op>_reference` is the definition.

Layout [B, T, H, D] everywhere; the fast forms equal their references to float tolerance
(tests/test_ops_*.py) and are differentiable.
"""

from statetrack.ops.delta_product import delta_product, delta_product_reference
from statetrack.ops.delta_rule import delta_rule, delta_rule_reference
from statetrack.ops.dense import dense_transition, dense_transition_reference
from statetrack.ops.diagonal import diagonal_scan, diagonal_scan_reference

__all__ = [
    "delta_product",
    "delta_product_reference",
    "delta_rule",
    "delta_rule_reference",
    "dense_transition",
    "dense_transition_reference",
    "diagonal_scan",
    "diagonal_scan_reference",
]
