"""RWKV-7 "Goose" time mixing (Peng et al. 2025): the delta rule with a vector decay and a
vector in-context learning rate, a diagonal-plus-low-rank transition run by the `dplr` op."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import DEFAULT_EIG_RANGE, Spectral, check_eig_range, check_input, head_split
from statetrack.layers.registry import register_model
from statetrack.ops.dplr import dplr

# the largest per-step log-decay magnitude, e^-0.5 (Peng et al. 2025): every decay lies in (0.545, 1)
DECAY_BOUND = math.exp(-0.5)


def _low_rank(d_in: int, rank: int, d_out: int, activation: nn.Module, bias: bool = True) -> nn.Sequential:
    """x -> W_2 act(W_1 x) (+ bias): RWKV's low-rank ("LoRA") projections of the decay, iclr and gate."""
    return nn.Sequential(nn.Linear(d_in, rank, bias=False), activation, nn.Linear(rank, d_out, bias=bias))


@register_model(
    "rwkv7",
    display="RWKV-7 {eig_range}",
    summary="RWKV-7: the delta rule with a vector decay and in-context learning rate, a diagonal-plus-low-rank "
    "transition (Peng et al. 2025); eig_range [-1,1] widens the learning rate to (0, 1 + w)",
)
class RWKV7(Spectral, nn.Module):
    """RWKV-7: the delta rule with a vector decay and in-context learning rate, a diagonal-plus-low-rank
    transition (Peng et al. 2025).

    Per head, with the state S_t [Dk, Dv] (the transpose of the paper's, as fla):

        S_t = (diag(w_t) - (kappa_t * iclr_t) kappa_t^T) S_{t-1} + k~_t v_t^T,
        o_t = GroupNorm(S_t^T r_t) + (r_t . (u * k~_t)) v_t,    y_t = W_o (o_t * g_t)

    Every input is token-shifted: x_c = x_t + mu_c (x_{t-1} - x_t) per branch c (r, w, k, v, a, g).
    r, k, v are linear; the decay w_t = exp(-e^-0.5 sigmoid(d_t)), d_t = w_0 + W_2 tanh(W_1 x_w) in
    (0.545, 1); iclr_t = s sigmoid(a_0 + W_2 W_1 x_a); g_t = W_2 sigmoid(W_1 x_g); the removal key
    kappa_t = normalize(k_t * k_k) per head; the written key k~_t = k_t * (1 + (iclr_t - 1) * k_a);
    u (fla's r_k) the bonus of the current token. Each transition is similar to the symmetric
    diag(w) - s s^T (s = sqrt(iclr) kappa), so its eigenvalues are real, at most max(w) <= 1 and
    above min(w) - max(iclr).

    eig_range "[0,1]" (the paper): s = 1, iclr in (0, 1), the delta rule's range (1 - iclr along
    kappa where w = 1); with the decay the lowest eigenvalue can still reach w - iclr > -0.46.
    "[-1,1]": s = 1 + w_t per channel, iclr in (0, 1 + w), which reaches -1 along kappa (Grazzi et
    al. 2025's doubling of beta where w = 1) and keeps every eigenvalue above -1, where 2 sigmoid
    would reach w - 2 > -1.46 and expand the state. State: (the last input [B, d_model], S [B, H, Dk, Dv]).
    """

    departures = (
        "no value residual (the paper mixes each layer's v towards the first layer's; a mixer sees no other "
        "layer); PyTorch's default initialisation of the projections and low-rank maps (the paper: orthogonal "
        "projections, zero output projection and low-rank down-projections), the paper's layer-0 schedule for "
        "the shift, decay, iclr and key vectors; one rank (low_rank) for the decay, iclr and gate maps; "
        "eig_range [-1,1] widens iclr to (0, 1 + w), which the paper does not offer"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        # diag(w) - kappa (iclr * kappa)^T is similar to a symmetric matrix (iclr > 0): real eigenvalues;
        # its [0, 1] range stays above -0.46, its [-1, 1] range reaches -1 along kappa
        return "generalized-delta" if spec["eig_range"] == "[0,1]" else "generalized-delta-signed"

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        head_dim: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
        low_rank: int = 32,
    ):
        super().__init__()
        check_eig_range(eig_range)
        if not isinstance(low_rank, int) or isinstance(low_rank, bool) or low_rank < 1:
            raise StatetrackError(
                f"low_rank (the rank of the decay, iclr and gate maps) must be an integer >= 1, got {low_rank!r}"
            )
        self.d_model, self.eig_range, self.low_rank = d_model, eig_range, low_rank
        self.num_heads, self.head_dim = head_split(d_model, num_heads, head_dim, takes_head_dim=True)
        inner = self.num_heads * self.head_dim
        self.shift_mix = nn.Parameter(torch.zeros(6, d_model))  # mu_r, mu_w, mu_k, mu_v, mu_a, mu_g
        self.r_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.w_lora = _low_rank(d_model, low_rank, inner, nn.Tanh())
        self.a_lora = _low_rank(d_model, low_rank, inner, nn.Identity())
        self.g_lora = _low_rank(d_model, low_rank, inner, nn.Sigmoid(), bias=False)
        self.k_k = nn.Parameter(torch.zeros(inner))
        self.k_a = nn.Parameter(torch.zeros(inner))
        self.r_k = nn.Parameter(torch.zeros(self.num_heads, self.head_dim))
        self.g_norm = nn.GroupNorm(self.num_heads, inner, eps=self.head_dim * 1e-5)
        self.o_proj = nn.Linear(inner, d_model, bias=False)
        self._paper_init()

    @torch.no_grad()
    def _paper_init(self):
        """The paper's schedule for the first of one layer (fla's `_initialize_weights`, layer_idx 0)."""
        if self.k_k.is_meta:
            return
        D, inner, hd = self.d_model, self.k_k.numel(), self.head_dim
        ddd = torch.arange(D, dtype=torch.float32) / D
        for row, power in enumerate((0.2, 0.9, 0.7, 0.7, 0.9, 0.2)):  # r, w, k, v, a, g
            self.shift_mix[row] = 1 - ddd.pow(power)
        n = torch.arange(inner, dtype=torch.float32)
        linear = n / max(inner - 1, 1) - 0.5
        zigzag = ((n % hd) - (hd - 1) / 2) / max((hd - 1) / 2, 1e-9) if hd > 1 else torch.zeros(inner)
        zigzag = zigzag * zigzag.abs()
        self.w_lora[2].bias.copy_(-6 + 6 * (n / max(inner - 1, 1)) + 0.5 + 2.5 * zigzag)
        self.a_lora[2].bias.copy_(-0.19 + 0.3 * zigzag + 0.4 * linear)
        self.k_k.copy_(0.71 - 0.1 * linear)
        self.k_a.fill_(1.02)
        self.r_k.fill_(-0.04)

    def gates(self, x: torch.Tensor, last: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The recurrence's inputs for x [B, T, d_model] after the input `last` [B, d_model] (None:
        zeros): r, k~, v, kappa, iclr and the log-decay gk [B, T, H, Dk], and the gate g [B, T, inner]."""
        B, T, _ = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        previous = torch.cat([x.new_zeros(B, 1, self.d_model) if last is None else last[:, None], x[:, :-1]], 1)
        delta = previous - x
        xr, xw, xk, xv, xa, xg = (torch.addcmul(x, delta, mu) for mu in self.shift_mix.unbind(0))
        gk = (-DECAY_BOUND * torch.sigmoid(self.w_lora(xw))).view(heads)  # log w_t
        iclr = torch.sigmoid(self.a_lora(xa)).view(heads)
        if self.eig_range == "[-1,1]":
            iclr = iclr * (1 + gk.exp())
        k = self.k_proj(xk).view(heads)
        kappa = F.normalize(k * self.k_k.view(self.num_heads, self.head_dim), dim=-1)
        k = k * (1 + (iclr - 1) * self.k_a.view(self.num_heads, self.head_dim))
        r, v = self.r_proj(xr).view(heads), self.v_proj(xv).view(heads)
        return {"r": r, "k": k, "v": v, "kappa": kappa, "iclr": iclr, "gk": gk, "g": self.g_lora(xg)}

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        last, S = (None, None) if state is None else state
        p = self.gates(x, last)
        o, S = dplr(p["r"], p["k"], p["v"], -p["kappa"], p["kappa"] * p["iclr"], p["gk"], scale=1.0, initial_state=S)
        inner = self.num_heads * self.head_dim
        o = self.g_norm(o.reshape(B * T, inner)).view(B, T, self.num_heads, self.head_dim)
        bonus = (p["r"] * p["k"] * self.r_k).sum(-1, keepdim=True) * p["v"]  # (r . (u * k~)) v
        y = self.o_proj((o + bonus).reshape(B, T, inner) * p["g"])
        if T:
            last = x[:, -1].clone()  # a copy: a view would keep the whole input alive
        elif last is None:
            last = x.new_zeros(B, self.d_model)
        return y, (last, S)

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """diag(w_t) - (kappa_t * iclr_t) kappa_t^T, [B, T, H, Dk, Dk] (S_t = A_t S_{t-1} + ...)."""
        p = self.gates(x)
        low_rank = (p["kappa"] * p["iclr"])[..., :, None] * p["kappa"][..., None, :]
        return torch.diag_embed(p["gk"].exp()) - low_rank

    def transition_eigenvalues(self, x: torch.Tensor) -> torch.Tensor:
        """The transitions' real eigenvalues [B, T, H, Dk], from the similar symmetric diag(w) - s s^T,
        s = sqrt(iclr) kappa (conjugating by diag(sqrt(iclr)))."""
        p = self.gates(x)
        s = p["iclr"].sqrt() * p["kappa"]
        return torch.linalg.eigvalsh(torch.diag_embed(p["gk"].exp()) - s[..., :, None] * s[..., None, :])
