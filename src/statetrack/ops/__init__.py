"""Pure tensor functions for recurrences (linear ones, the attention-style PaTH and DeltaFormer, and
the nonlinear sLSTM, NRU and Panini cells); each `<op>_reference` is the definition.

Layout [B, T, H, D] everywhere; the fast forms equal their references to float tolerance
(tests/ops/test_ops_*.py, tests/ops/test_speedpaths_*.py, tests/ops/test_long_input.py) and are differentiable
(the nonlinear cells' inference forms by running their reference where a gradient is recorded).
Every autograd Function with a hand-written backward lives here, beside the reference it is tested
against; the layers hold modules and call these.
"""

from statetrack.ops.delta_product import delta_product, delta_product_reference
from statetrack.ops.delta_rule import delta_rule, delta_rule_reference
from statetrack.ops.deltaformer import deltaformer, deltaformer_reference
from statetrack.ops.dense import (
    dense_transition,
    dense_transition_reference,
    unit_normalize,
    unit_normalize_reference,
)
from statetrack.ops.diagonal import diagonal_scan, diagonal_scan_reference
from statetrack.ops.dplr import dplr, dplr_reference
from statetrack.ops.fixed_point import (
    bedouin_iteration,
    bedouin_iteration_nograd,
    bedouin_iteration_reference,
    fixed_point_iteration,
    fixed_point_iteration_nograd,
    fixed_point_iteration_reference,
    gated_decay,
    gated_decay_reference,
)
from statetrack.ops.ids4 import ids4_scan, ids4_scan_reference
from statetrack.ops.kda import kda, kda_reference
from statetrack.ops.mamba3 import mamba3, mamba3_reference
from statetrack.ops.nonlinear import (
    nru_recurrence,
    nru_recurrence_fused,
    nru_recurrence_reference,
    slstm_recurrence,
    slstm_recurrence_fused,
    slstm_recurrence_reference,
)
from statetrack.ops.panini import (
    panini_recurrence,
    panini_recurrence_reference,
    sinkhorn,
    sinkhorn_reference,
)
from statetrack.ops.path_attention import path_attention, path_attention_reference
from statetrack.ops.pdssm import pdssm, pdssm_reference
from statetrack.ops.selective import (
    selective_scan,
    selective_scan_reference,
    ssd_scan,
    ssd_scan_reference,
)

__all__ = [
    "bedouin_iteration",
    "bedouin_iteration_nograd",
    "bedouin_iteration_reference",
    "delta_product",
    "delta_product_reference",
    "delta_rule",
    "delta_rule_reference",
    "deltaformer",
    "deltaformer_reference",
    "dense_transition",
    "dense_transition_reference",
    "diagonal_scan",
    "diagonal_scan_reference",
    "dplr",
    "dplr_reference",
    "fixed_point_iteration",
    "fixed_point_iteration_nograd",
    "fixed_point_iteration_reference",
    "gated_decay",
    "gated_decay_reference",
    "ids4_scan",
    "ids4_scan_reference",
    "kda",
    "kda_reference",
    "mamba3",
    "mamba3_reference",
    "nru_recurrence",
    "nru_recurrence_fused",
    "nru_recurrence_reference",
    "panini_recurrence",
    "panini_recurrence_reference",
    "path_attention",
    "path_attention_reference",
    "pdssm",
    "pdssm_reference",
    "selective_scan",
    "selective_scan_reference",
    "sinkhorn",
    "sinkhorn_reference",
    "slstm_recurrence",
    "slstm_recurrence_fused",
    "slstm_recurrence_reference",
    "ssd_scan",
    "ssd_scan_reference",
    "unit_normalize",
    "unit_normalize_reference",
]
