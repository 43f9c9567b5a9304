"""The delta-rule family: DeltaProduct_{n_h} (Siems et al. 2025), DeltaNet = DeltaProduct_1
(Schlag et al. 2021; Yang et al. 2024b), Gated DeltaNet (Yang et al. 2025a) and Gated
DeltaProduct_{n_h} (Siems et al. 2025), each with the eigenvalue-range switch of Grazzi et al. 2025.

One class holds the projections and the forward: a token contributes n_h delta-rule micro-steps,
run by the `delta_rule` op for n_h = 1 (the faster path) and by `delta_product` otherwise.
"""

from __future__ import annotations

from typing import TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import (
    DEFAULT_EIG_RANGE,
    CausalConv1d,
    Spectral,
    causal_conv,
    check_eig_range,
    check_input,
    head_split,
    inverse_softplus,
    log_uniform_dt,
)
from statetrack.layers.registry import register_model
from statetrack.ops import delta_product, delta_rule


class _Decay(TypedDict, total=False):
    g: torch.Tensor  # [B, T, H] log-gate, where the family has a decay


class DeltaInputs(_Decay):
    """The delta rule's inputs in the `delta_product` layout (`DeltaProduct.gates`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    beta: torch.Tensor


def householder(k: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """I - beta k k^T for k [..., D] and beta [...]: [..., D, D]."""
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
    return eye - beta[..., None, None] * k[..., :, None] * k[..., None, :]


@register_model(
    "deltaproduct",
    display="DeltaProduct_{n_h} {eig_range}",
    summary="n_h delta-rule steps per token, a product of n_h generalized Householders (Siems et al. 2025); "
    "eig_range [-1,1] as Grazzi et al. 2025",
)
class DeltaProduct(Spectral, nn.Module):
    """n_h delta-rule steps per token, a product of n_h generalized Householders (Siems et al. 2025);
    eig_range [-1,1] as Grazzi et al. 2025.

    Per head, token t applies n_h micro-steps j = 1..n_h, each with its own key, value and beta:

        S <- (I - beta_{t,j} k_{t,j} k_{t,j}^T) S + beta_{t,j} k_{t,j} v_{t,j}^T,    o_t = S^T q_t

    so the state transition is A(x_t) = prod_j (I - beta_{t,j} k_{t,j} k_{t,j}^T). q, k are
    L2-normalised SiLU projections, v a linear projection, beta = s sigmoid(w_b x) with s = 1 for
    eig_range "[0,1]" and s = 2 for "[-1,1]" (Grazzi et al. 2025; `common.EIG_RANGES`). The head
    outputs are RMS-normalised before the output projection, which makes the readout invariant to
    the state's overall scale. n_h = 1 is DeltaNet. State: S [B, H, Dk, Dv].

    `short_conv` = w > 0 puts the short convolution of Yang et al. 2024b (fla's DeltaNet layer's
    default, w = 4) between the projections and the rule: each channel of the q, k and v projections
    goes through a depthwise causal convolution over the last w tokens (no bias), then a SiLU, so
    q_t = normalize(SiLU(sum_i c^q_i W_q x_{t-i})), k likewise and v_t = SiLU(sum_i c^v_i W_v x_{t-i}).
    State then: (the last w - 1 projections [B, w - 1, C], S).
    """

    departures = (
        "eig_range [-1,1] doubles beta (Grazzi et al. 2025); no short convolution before q, k, v unless "
        "short_conv is set; q unscaled (L2-normalised); per-head RMSNorm on the outputs before the output "
        "projection"
    )
    unnamed_defaults: tuple[str, ...] = ("short_conv",)  # left out of the resolved spec while 0 (run ids unchanged)

    @staticmethod
    def transition_class(spec: dict) -> str | None:
        positive = spec["eig_range"] == "[0,1]"
        if spec.get("n_h", 1) == 1:  # DeltaNet, Gated DeltaNet, KDA: one Householder per token
            return "householder-positive" if positive else "householder-real"
        if positive:  # two in [0, 1]: a product of two symmetric PSD matrices, real eigenvalues >= 0; more: none
            return "householder-positive" if spec["n_h"] == 2 else None
        return "householder-products"

    def __init__(
        self,
        d_model: int,
        num_heads: int = 1,
        n_h: int = 2,
        head_dim: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
        short_conv: int = 0,
    ):
        super().__init__()
        if not isinstance(n_h, int) or n_h < 1:
            raise StatetrackError(f"n_h (Householders per token) must be an integer >= 1, got {n_h!r}")
        if not isinstance(short_conv, int) or isinstance(short_conv, bool) or short_conv < 0:
            raise StatetrackError(
                f"short_conv (the short convolution's width in tokens; 0: none) must be an integer >= 0, "
                f"got {short_conv!r}"
            )
        self.d_model, self.n_h, self.eig_range, self.scale = d_model, n_h, eig_range, check_eig_range(eig_range)
        self.num_heads, self.head_dim = head_split(d_model, num_heads, head_dim, takes_head_dim=True)
        inner = self.num_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, n_h * inner, bias=False)
        self.v_proj = nn.Linear(d_model, n_h * inner, bias=False)
        self.b_proj = nn.Linear(d_model, n_h * self.num_heads, bias=True)
        self.o_norm = nn.RMSNorm(self.head_dim)
        self.o_proj = nn.Linear(inner, d_model, bias=False)
        self.short_conv = short_conv
        # one depthwise convolution over the q, k and v channels side by side: three convolutions in one
        self.conv = CausalConv1d((1 + 2 * n_h) * inner, short_conv, bias=False) if short_conv else None

    def gates(self, x: torch.Tensor) -> DeltaInputs:
        """The delta rule's inputs for x [B, T, d_model], token t's micro-step j at t * n_h + j:
        q [B, T, H, D]; k, v [B, T n_h, H, D]; beta [B, T n_h, H] (the `delta_product` layout); with
        a short convolution, from a zero convolution state."""
        return self._gates(x)[0]

    def _gates(
        self, x: torch.Tensor, conv_state: torch.Tensor | None = None
    ) -> tuple[DeltaInputs, torch.Tensor | None]:
        """`gates(x)` from the convolution state `conv_state`, and the convolution's next state."""
        B, T, _ = x.shape
        steps = (B, T * self.n_h, self.num_heads, self.head_dim)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.conv is None:
            q, k = F.silu(q), F.silu(k)
        else:
            qkv, conv_state = causal_conv(self.conv, torch.cat([q, k, v], dim=-1), conv_state)
            q, k, v = F.silu(qkv).split([q.shape[-1], k.shape[-1], v.shape[-1]], dim=-1)
        q = F.normalize(q.reshape(B, T, self.num_heads, self.head_dim), dim=-1)
        k = F.normalize(k.reshape(steps), dim=-1)
        v = v.reshape(steps)
        beta = self.scale * torch.sigmoid(self.b_proj(x)).view(steps[:3])
        return {"q": q, "k": k, "v": v, "beta": beta}, conv_state

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        conv_state, S = state if self.conv is not None and state is not None else (None, state)
        gates, conv_state = self._gates(x, conv_state)
        if self.n_h == 1:
            o, S = delta_rule(**gates, initial_state=S, output_final_state=True)
        else:
            o, S = delta_product(**gates, initial_state=S, output_final_state=True, num_householder=self.n_h)
        return self.o_proj(self.o_norm(o).reshape(B, T, -1)), (S if self.conv is None else (conv_state, S))

    def householder_factors(self, x: torch.Tensor) -> torch.Tensor:
        """The n_h factors I - beta_{t,j} k_{t,j} k_{t,j}^T, [B, T, n_h, H, D, D] (j = 1 first)."""
        g = self.gates(x)
        B, T, _ = x.shape
        return householder(g["k"], g["beta"]).view(B, T, self.n_h, self.num_heads, self.head_dim, self.head_dim)

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """A(x_t) = H_{n_h} ... H_1 (the last micro-step acts last), [B, T, H, D, D]."""
        factors = self.householder_factors(x).unbind(2)
        A = factors[0]
        for factor in factors[1:]:
            A = factor @ A
        return A


@register_model(
    "deltanet",
    display="DeltaNet {eig_range}",
    summary="The delta rule, matrix state per head (Schlag et al. 2021; Yang et al. 2024b); "
    "eig_range [-1,1] as Grazzi et al. 2025",
)
class DeltaNet(DeltaProduct):
    """The delta rule, matrix state per head (Schlag et al. 2021; Yang et al. 2024b); eig_range [-1,1]
    as Grazzi et al. 2025.

        S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t

    DeltaProduct_1 (its docstring has the projections); eig_range "[-1,1]" takes beta to (0, 2), so
    the transition's eigenvalue 1 - beta along k reaches -1 (Grazzi et al. 2025).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        head_dim: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
        short_conv: int = 0,
    ):
        super().__init__(d_model, num_heads, n_h=1, head_dim=head_dim, eig_range=eig_range, short_conv=short_conv)


@register_model(
    "gated_deltanet",
    display="Gated DeltaNet {eig_range}",
    summary="The delta rule with a Mamba-2 style scalar decay per head (Yang et al. 2025a); "
    "eig_range [-1,1] as Grazzi et al. 2025",
)
class GatedDeltaNet(DeltaNet):
    """The delta rule with a Mamba-2 style scalar decay per head (Yang et al. 2025a); eig_range [-1,1]
    as Grazzi et al. 2025.

        S_t = (I - beta_t k_t k_t^T)(alpha_t S_{t-1}) + beta_t k_t v_t^T,

    alpha_t = exp(g_t), g_t = -exp(A_log) softplus(w_a x_t + b) per head (the Mamba-2 decay, Dao &
    Gu 2024); beta as in DeltaNet, so eig_range "[-1,1]" gives transition eigenvalues alpha (1 - beta)
    in (-1, 1]. State: S [B, H, Dk, Dv].
    """

    departures = DeltaProduct.departures + "; no output gate"

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        head_dim: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
        short_conv: int = 0,
    ):
        super().__init__(d_model, num_heads, head_dim, eig_range, short_conv)
        self.a_proj, self.A_log = head_decay_parameters(d_model, self.num_heads)

    def _gates(
        self, x: torch.Tensor, conv_state: torch.Tensor | None = None
    ) -> tuple[DeltaInputs, torch.Tensor | None]:
        gates, conv_state = super()._gates(x, conv_state)
        gates["g"] = head_log_decay(self.a_proj, self.A_log, x)
        return gates, conv_state

    def transition_matrices(self, x):
        """alpha_t (I - beta_t k_t k_t^T), [B, T, H, Dk, Dk]."""
        g = self.gates(x)
        return g["g"].exp()[..., None, None] * householder(g["k"], g["beta"])


def head_decay_parameters(d_model: int, num_heads: int) -> tuple[nn.Linear, nn.Parameter]:
    """(a_proj, A_log) of the Mamba-2 decay per head (Dao & Gu 2024) that `head_log_decay` computes:
    the Mamba dt init in a_proj's bias (log-uniform in [1e-3, 1e-1] through softplus), A = exp(A_log) in [1, 16]."""
    a_proj = nn.Linear(d_model, num_heads, bias=True)
    with torch.no_grad():
        a_proj.bias.copy_(inverse_softplus(log_uniform_dt(num_heads)))
    return a_proj, nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1, 16)))


def head_log_decay(a_proj: nn.Linear, A_log: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """g_t = log alpha_t = -exp(A_log) softplus(a_proj(x_t)), [B, T, H]."""
    return -A_log.exp() * F.softplus(a_proj(x))


@register_model(
    "gated_deltaproduct",
    display="Gated DeltaProduct_{n_h} {eig_range}",
    summary="DeltaProduct_{n_h} with a Mamba-2 style scalar decay per head (Siems et al. 2025, as fla's gated "
    "DeltaProduct); eig_range [-1,1] by default",
)
class GatedDeltaProduct(DeltaProduct):
    """DeltaProduct_{n_h} with a Mamba-2 style scalar decay per head (Siems et al. 2025, as fla's
    gated DeltaProduct); eig_range [-1,1] by default.

    Per head, token t first decays the state, then applies its n_h micro-steps j = 1..n_h:

        S <- alpha_t S;   S <- (I - beta_{t,j} k_{t,j} k_{t,j}^T) S + beta_{t,j} k_{t,j} v_{t,j}^T,    o_t = S^T q_t

    so A(x_t) = alpha_t prod_j (I - beta_{t,j} k_{t,j} k_{t,j}^T), with alpha_t = exp(g_t) and
    g_t = -exp(A_log) softplus(w_a x_t + b) per head, Gated DeltaNet's decay (Yang et al. 2025a; Dao &
    Gu 2024). q, k, v, beta and the short convolution as DeltaProduct. eig_range defaults to "[-1,1]"
    (beta in (0, 2)), as fla's GatedDeltaProduct layer defaults to allow_neg_eigval=True, so the
    transition's eigenvalues lie in [-alpha_t, alpha_t]. n_h = 1 is Gated DeltaNet. Two heads by
    default, as Gated DeltaNet here: with one, a single decay rules the whole state, and the demo's
    parity fitted its training length 40 in none of 3 seeds. State: S [B, H, Dk, Dv].
    """

    departures = (
        DeltaProduct.departures.replace(
            "no short convolution before q, k, v unless short_conv is set",
            "no short convolution before q, k, v unless short_conv is set, where fla's layer has one by default "
            "(width 4, then a SiLU on q, k and v; 'crucial' in its warning) and gives v a SiLU without it too: "
            "with short_conv 4, S3 at width 32 fitted 0 of 3 seeds where the default fitted 2 (docs/models.md)",
        )
        + "; no output gate; decay init as Gated DeltaNet here (A in [1, 16])"
    )

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        n_h: int = 2,
        head_dim: int | None = None,
        eig_range: str = "[-1,1]",
        short_conv: int = 0,
    ):
        super().__init__(d_model, num_heads, n_h, head_dim, eig_range, short_conv)
        self.a_proj, self.A_log = head_decay_parameters(d_model, self.num_heads)

    def _gates(
        self, x: torch.Tensor, conv_state: torch.Tensor | None = None
    ) -> tuple[DeltaInputs, torch.Tensor | None]:
        gates, conv_state = super()._gates(x, conv_state)
        gates["g"] = head_log_decay(self.a_proj, self.A_log, x)  # [B, T, H]: on each token, before its first micro-step
        return gates, conv_state

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """A(x_t) = alpha_t H_{n_h} ... H_1, [B, T, H, D, D]."""
        alpha = head_log_decay(self.a_proj, self.A_log, x).exp()
        return alpha[..., None, None] * super().transition_matrices(x)
