"""Pure tensor functions for recurrences (linear ones, and the nonlinear sLSTM and NRU cells); each
`<op>_reference` is the definition.

Layout [B, T, H, D] everywhere; the fast forms equal their references to float tolerance
(tests/test_ops_*.py, tests/test_long_input.py) and are differentiable (the nonlinear cells by running
their reference where a gradient is recorded).
"""

from statetrack.ops.delta_product import delta_product, delta_product_reference
from statetrack.ops.delta_rule import delta_rule, delta_rule_reference
from statetrack.ops.dense import dense_transition, dense_transition_reference
from statetrack.ops.diagonal import diagonal_scan, diagonal_scan_reference
from statetrack.ops.fixed_point import (
    bedouin_iteration,
    bedouin_iteration_nograd,
    bedouin_iteration_reference,
    fixed_point_iteration,
    fixed_point_iteration_nograd,
    fixed_point_iteration_reference,
)
from statetrack.ops.nonlinear import nru_recurrence, nru_recurrence_reference, slstm_recurrence, slstm_recurrence_reference
from statetrack.ops.selective import selective_scan, selective_scan_reference

__all__ = [
    "bedouin_iteration",
    "bedouin_iteration_nograd",
    "bedouin_iteration_reference",
    "delta_product",
    "delta_product_reference",
    "delta_rule",
    "delta_rule_reference",
    "dense_transition",
    "dense_transition_reference",
    "diagonal_scan",
    "diagonal_scan_reference",
    "fixed_point_iteration",
    "fixed_point_iteration_nograd",
    "fixed_point_iteration_reference",
    "nru_recurrence",
    "nru_recurrence_reference",
    "selective_scan",
    "selective_scan_reference",
    "slstm_recurrence",
    "slstm_recurrence_reference",
]
