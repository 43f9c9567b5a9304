"""fla-core's Triton kernels (the flash-linear-attention project) behind our delta-rule ops on CUDA.

On a CUDA tensor, when fla-core and triton are installed, `delta_rule` (plain and gated),
`delta_product`, `kda` and `dplr` call fla's chunked kernels instead of our chunkwise forms; each
keeps its contract (layout [B, T, H, D], the same recurrence, state and gradients), and
tests/ops/test_fla_kernels.py holds the two forms equal. STATETRACK_FLA=0 keeps our forms on a GPU
too. On a CPU, or in float64 (fla's kernels take float32, float16 and bfloat16), nothing here
imports fla or triton.

fla's plain delta rule and gated DeltaProduct kernels refuse float32, so all three of our
delta-rule ops go through fla's gated delta rule (`chunk_gated_delta_rule`, which takes float32):

    delta rule            the log-gate g = 0 (alpha_t = 1)
    gated delta rule      as it is
    DeltaProduct_{n_h}    the gated delta rule on the T n_h interleaved micro-steps, the gate on each
                          token's first micro-step and q on its last (Siems et al. 2025: DeltaProduct is
                          DeltaNet run on the micro-steps, read at each token's last one); o read there

with the read-out scale 1 (ours has none). KDA goes to `chunk_kda`, the DPLR rule of RWKV-7 to
`chunk_dplr_delta_rule`, both with our scale.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from types import SimpleNamespace

import torch

ENV = "STATETRACK_FLA"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256  # fla's chunked kernels assert K <= 256


@functools.cache
def _installed() -> bool:
    """fla and triton are importable (found, not imported: importing fla pulls in triton)."""
    return all(importlib.util.find_spec(name) is not None for name in ("fla", "triton"))


def ready(x: torch.Tensor) -> bool:
    """True when an op on `x` ([B, T, H, Dk]) goes to fla's kernels: a CUDA tensor of a dtype they take,
    a head no wider than 256, fla-core and triton installed, and STATETRACK_FLA not "0"."""
    return (
        x.is_cuda
        and x.dtype in DTYPES
        and x.shape[-1] <= MAX_HEAD_DIM
        and os.environ.get(ENV, "1") != "0"
        and _installed()
    )


@functools.cache
def kernels() -> SimpleNamespace:
    """fla's three chunked functions, imported on first use (only ever on a CUDA tensor)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.generalized_delta_rule import chunk_dplr_delta_rule
    from fla.ops.kda import chunk_kda

    return SimpleNamespace(gated_delta_rule=chunk_gated_delta_rule, kda=chunk_kda, dplr=chunk_dplr_delta_rule)


def delta_rule(q, k, v, beta, g, initial_state, output_final_state):
    """`statetrack.ops.delta_rule` through fla's gated delta rule (g = 0 when there is no gate)."""
    g = torch.zeros_like(beta) if g is None else g
    return kernels().gated_delta_rule(
        q=q, k=k, v=v, g=g, beta=beta, scale=1.0, initial_state=initial_state, output_final_state=output_final_state
    )


def delta_product(q, k, v, beta, g, initial_state, output_final_state, num_householder):
    """`statetrack.ops.delta_product` as fla's gated delta rule on the interleaved micro-steps."""
    B, T, H, Dk = q.shape
    n_h = num_householder
    q_micro = torch.cat([q.new_zeros(B, T, n_h - 1, H, Dk), q.unsqueeze(2)], dim=2).reshape(B, T * n_h, H, Dk)
    g_micro = beta.new_zeros(B, T * n_h, H)
    if g is not None:  # the gate on each token's first micro-step, none on the others
        g_micro = torch.cat([g.unsqueeze(2), g.new_zeros(B, T, n_h - 1, H)], dim=2).reshape(B, T * n_h, H)
    o, final = delta_rule(q_micro, k, v, beta, g_micro, initial_state, output_final_state)
    return o.reshape(B, T, n_h, H, -1)[:, :, -1], final


def kda(q, k, v, beta, g, scale, initial_state, output_final_state):
    """`statetrack.ops.kda` through fla's `chunk_kda` (g the log-decay per key channel; it takes the
    initial state in float32 only)."""
    initial_state = None if initial_state is None else initial_state.float()
    return kernels().kda(
        q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=initial_state, output_final_state=output_final_state
    )


def dplr(q, k, v, a, b, gk, scale, initial_state, output_final_state):
    """`statetrack.ops.dplr` through fla's `chunk_dplr_delta_rule`."""
    return kernels().dplr(
        q=q, k=k, v=v, a=a, b=b, gk=gk, scale=scale, initial_state=initial_state, output_final_state=output_final_state
    )
