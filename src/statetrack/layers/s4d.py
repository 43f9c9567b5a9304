"""Complex diagonal state-space mixers: S4D (time-invariant) and IDS4 (input-dependent).

Per channel c and complex mode n (d_state // 2 modes, the conjugate half implied by taking 2 Re):

    h_t[c, n] = a_t[c, n] h_{t-1}[c, n] + Bbar_t[c, n] u_t[c],     y_t[c] = 2 Re(sum_n C[c, n] h_t[c, n]) + D[c] u_t[c]
    a_t = exp(dt lambda),  Bbar_t = (a_t - 1) / lambda * B    (zero-order hold)

S4D (Gu et al. 2022): lambda = -exp(A_re_log) + i A_im, S4D-Lin init -1/2 + i pi n; dt per channel,
log-uniform in [1e-3, 1e-1]; a, B, C do not depend on the input. IDS4 (Merrill et al. 2024, "The
illusion of state"): the transition depends on the input, here through dt_t[c] = softplus(W x_t + b)
and a rotation offset phi_t[n] = W_phi x_t added to the imaginary part, lambda_t = -exp(A_re_log) +
i (A_im + phi_t): complex, input-dependent a_t. Output: GELU, then a GLU out-projection (S4D block).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import Spectral, check_input, inverse_softplus, log_uniform_dt
from statetrack.layers.registry import register_model
from statetrack.ops import diagonal_scan


@register_model("s4d", display="S4D")
class S4D(Spectral, nn.Module):
    """Time-invariant complex diagonal SSM: S4D-Lin init, zero-order hold (Gu et al. 2022).

    input_dependent=True is IDS4; the module docstring has the equations.

    State: h [B, d_model, d_state // 2] complex.
    """

    departures = ("C is initialised with std 0.5 / sqrt(d_state / 2) per real and imaginary part, smaller than the "
                  "unit complex normal of Gu et al. 2022's reference S4D; the equations are as published.")

    def __init__(self, d_model: int, d_state: int = 32, input_dependent: bool = False):
        super().__init__()
        if d_state < 2 or d_state % 2:
            raise StatetrackError(f"d_state must be an even number >= 2 (complex modes come in conjugate pairs), got {d_state}")
        self.d_model, self.modes, self.input_dependent = d_model, d_state // 2, input_dependent
        n = self.modes
        self.A_re_log = nn.Parameter(torch.full((d_model, n), math.log(0.5)))
        self.A_im = nn.Parameter(math.pi * torch.arange(n, dtype=torch.float32).repeat(d_model, 1))
        self.B = nn.Parameter(torch.stack([torch.ones(d_model, n), torch.zeros(d_model, n)], -1))  # real view of complex
        self.C = nn.Parameter(torch.randn(d_model, n, 2) * (0.5 / math.sqrt(n)))
        self.D = nn.Parameter(torch.ones(d_model))
        if input_dependent:
            self.dt_proj = nn.Linear(d_model, d_model)
            with torch.no_grad():
                self.dt_proj.weight.mul_(0.1)
                self.dt_proj.bias.copy_(inverse_softplus(log_uniform_dt(d_model)))
            self.phi_proj = nn.Linear(d_model, n, bias=False)
        else:
            self.log_dt = nn.Parameter(log_uniform_dt(d_model).log())
        self.out_proj = nn.Linear(d_model, 2 * d_model)

    def _discretize(self, x):
        """a, Bbar [B or 1, T or 1, d_model, modes] (complex) for input x [B, T, d_model]."""
        lam_re = -self.A_re_log.exp()
        if self.input_dependent:
            dt = F.softplus(self.dt_proj(x))[..., None]  # [B, T, d, 1]
            lam_re, lam_im = lam_re.expand(x.shape[:2] + lam_re.shape), self.A_im + self.phi_proj(x)[:, :, None, :]
        else:
            dt = self.log_dt.exp()[None, None, :, None]  # [1, 1, d, 1]
            lam_re, lam_im = lam_re[None, None], self.A_im[None, None]
        # a = exp(dt lambda) = exp(dt Re lambda) (cos(dt Im lambda) + i sin(dt Im lambda)): torch's complex
        # exp is not vectorised, and on IDS4's [B, T, d, modes] it took 3x longer, forward and backward
        mag, angle = torch.exp(dt * lam_re), dt * lam_im
        a = torch.complex(mag * torch.cos(angle), mag * torch.sin(angle))
        return a, (a - 1) / torch.complex(lam_re, lam_im) * torch.view_as_complex(self.B)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        a, B_bar = self._discretize(x)
        b = B_bar * x[..., None]  # [B, T, d, modes] complex
        h, h_last = diagonal_scan(a.expand_as(b), b, state)
        y = 2 * torch.einsum("btdn,dn->btd", h, torch.view_as_complex(self.C)).real + self.D * x
        return F.glu(self.out_proj(F.gelu(y)), dim=-1), h_last

    def transition_eigenvalues(self, x):
        """The complex diagonal transitions a_t [B, T, d_model, modes]."""
        a, _ = self._discretize(x)
        return a.expand(x.shape[:2] + a.shape[2:])


@register_model("ids4", display="IDS4")
class IDS4(S4D):
    """S4D with an input-dependent complex transition: dt and rotation from the input (Merrill et al. 2024)."""

    departures = ("How the transition depends on the input (Merrill et al. 2024) is this project's choice: dt_t = "
                  "softplus(W x_t + b) per channel (as Mamba, Gu & Dao 2023) and a rotation W_phi x_t added to "
                  "Im(lambda) per mode, discretised by zero-order hold at every step; C initialised as in S4D.")

    def __init__(self, d_model: int, d_state: int = 32):
        super().__init__(d_model, d_state, input_dependent=True)
