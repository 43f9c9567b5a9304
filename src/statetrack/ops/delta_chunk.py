"""Chunkwise WY/UT delta rule with a hand-written backward (SPEC 1.3; the equations are in delta_rule.py).

Per chunk of C steps (batched over B, H and all chunks), with cumulative log-gate gamma, Dec_ij =
exp(gamma_i - gamma_j) for i >= j, Gam = exp(gamma), Gl = exp(gamma_C - gamma), tot = Gam_C:

    Kb = diag(beta) K,   A = (Kb K^T) (.) Dec,   T = (I + strictly-lower A)^-1,   WU = [W | U] = T [Kb (.) Gam | diag(beta) V]
    P  = lower(Q K^T (.) Dec),   Q' = diag(Gam) Q - P W,   PU = P U
    M  = tot I - (Gl (.) K)^T W,   X = (Gl (.) K)^T U,   S_{n+1} = M_n S_n + X_n,   O = Q' S_n + PU

The backward runs the chunk recurrence in reverse (lambda_n = Q'^T dO_n + M_n^T lambda_{n+1}) and
then every chunk-local gradient as batched products; the inverse needs no extra C^3 product because
dA = -T^T dT T^T = -(T^T dWU) WU^T. Compared with autograd through the same forward it stores fewer
intermediates and skips the zero-filled buffers autograd makes for slices and masks.

`every` > 1 reads Q only at every `every`-th step (DeltaProduct: each token's last micro-step): Q,
P, Q' and O then have C / every rows per chunk, at positions `rows`, and chunks hold whole tokens.
"""

from __future__ import annotations

import math

import torch

from statetrack.ops.triangular import unit_lower_inverse_nograd


def to_chunks(x: torch.Tensor, n: int, C: int) -> torch.Tensor:
    """[B, T, H, ...] -> contiguous [B, H, n, C, ...], zero-padded at the end of time."""
    B, T, H = x.shape[:3]
    if T == n * C:  # no padding: one transposing copy, no zero fill
        return x.transpose(1, 2).contiguous().unflatten(2, (n, C))
    out = x.new_empty((B, H, n * C) + tuple(x.shape[3:]))
    out[:, :, :T] = x.transpose(1, 2)
    out[:, :, T:] = 0
    return out.unflatten(2, (n, C))


def from_chunks(x: torch.Tensor, T: int) -> torch.Tensor:
    """[B, H, n, C, ...] -> [B, T, H, ...] (drops the padding)."""
    return x.flatten(2, 3)[:, :, :T].transpose(1, 2)


def _rowsum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).sum(-1)


def upper_rows(C: int, rows: torch.Tensor) -> torch.Tensor:
    """Mask [len(rows), C]: True where column j comes after the read position rows[i] (no look-ahead)."""
    return torch.arange(C, device=rows.device)[None, :] > rows[:, None]


def _addmm(acc: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """acc + x @ y over the leading batch dimensions, as one fused batched gemm (no extra add pass)."""
    shape = x.shape[:-1] + y.shape[-1:]
    flat = lambda t: t.reshape((-1,) + t.shape[-2:])  # noqa: E731
    return torch.baddbmm(flat(acc.expand(shape)), flat(x), flat(y)).view(shape)


class DeltaRuleChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, g, S0, n, C, every):
        B, T, H, Dk = k.shape
        Dv = v.shape[-1]
        Cq, Tq = C // every, T // every  # read positions per chunk and in all
        rows = torch.arange(every - 1, C, every, device=q.device)  # where q is read inside a chunk
        qc = to_chunks(q, n, Cq)  # [B, H, n, Cq, Dk]
        kc, vc = (to_chunks(x, n, C) for x in (k, v))  # [B, H, n, C, D]
        bc = to_chunks(beta, n, C)  # [B, H, n, C]
        gated = g is not None
        kb = kc * bc[..., None]
        kkb = kb @ kc.transpose(-1, -2)  # [B, H, n, C, C]
        qk = qc @ kc.transpose(-1, -2)  # [B, H, n, Cq, C]
        if gated:
            gamma = to_chunks(g, n, C).cumsum(-1)  # [B, H, n, C]
            upper = upper_rows(C, torch.arange(C, device=q.device))
            dec = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(upper, -math.inf).exp()
            gam, gl = gamma.exp(), (gamma[..., -1:] - gamma).exp()
            tot = gam[..., -1]  # [B, H, n]
            A = kkb * dec
            P = qk * dec[..., rows, :]
            rhs = torch.cat([kb * gam[..., None], vc * bc[..., None]], dim=-1)
            qd, kd = qc * gam[..., rows, None], kc * gl[..., None]
        else:
            A, P = kkb, qk.masked_fill(upper_rows(C, rows), 0)
            rhs = torch.cat([kb, vc * bc[..., None]], dim=-1)
            qd, kd = qc, kc
        Tinv = unit_lower_inverse_nograd(A)
        WU = Tinv @ rhs  # [B, H, n, C, Dk + Dv]
        PWU = P @ WU
        q_eff = qd - PWU[..., :Dk]
        PU = PWU[..., Dk:]
        KWU = kd.transpose(-1, -2) @ WU  # [B, H, n, Dk, Dk + Dv]
        M = KWU[..., :Dk].neg()
        M.diagonal(dim1=-2, dim2=-1).add_(tot[..., None] if gated else 1)
        Z = B * H
        Mt = M.reshape(Z, n, Dk, Dk).transpose(0, 1).contiguous()  # time-major [n, Z, Dk, Dk]
        Xt = KWU[..., Dk:].reshape(Z, n, Dk, Dv).transpose(0, 1).contiguous()  # one copy, not one per step
        states = q.new_empty(n + 1, Z, Dk, Dv)
        states[0] = S0.reshape(Z, Dk, Dv)
        for i in range(n):
            torch.baddbmm(Xt[i], Mt[i], states[i], out=states[i + 1])
        starts = states[:-1].transpose(0, 1).reshape(B, H, n, Dk, Dv)
        o = torch.baddbmm(PU.reshape(-1, Cq, Dv), q_eff.reshape(-1, Cq, Dk), starts.reshape(-1, Dk, Dv))
        o = from_chunks(o.reshape(B, H, n, Cq, Dv), Tq)
        saved = [qc, kc, vc, bc, kb, P, Tinv, WU, q_eff, kd, Mt, states, rows]
        if gated:
            saved += [kkb, qk, dec, gam, gl, tot]
        ctx.save_for_backward(*saved)
        ctx.meta = (gated, n, C, T, every)
        final = states[-1].reshape(B, H, Dk, Dv)
        return o, final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, d_final):
        gated, n, C, T, every = ctx.meta
        qc, kc, vc, bc, kb, P, Tinv, WU, q_eff, kd, Mt, states, rows = ctx.saved_tensors[:13]
        B, H, _, _, Dk = qc.shape
        Dv = vc.shape[-1]
        Z = B * H
        d_o = torch.zeros(B, T // every, H, Dv, dtype=qc.dtype, device=qc.device) if d_o is None else d_o
        dO = to_chunks(d_o, n, C // every)  # [B, H, n, Cq, Dv]
        starts = states[:-1].transpose(0, 1).reshape(B, H, n, Dk, Dv)
        # O = Q' S + PU
        dq_eff = dO @ starts.transpose(-1, -2)  # [B, H, n, Cq, Dk]
        dS_from_o = (q_eff.transpose(-1, -2) @ dO).reshape(Z, n, Dk, Dv).transpose(0, 1).contiguous()  # time-major
        # reverse chunk recurrence: lam_n = dL/dS_n
        lam = torch.empty_like(states)
        lam[n] = 0 if d_final is None else d_final.reshape(Z, Dk, Dv)
        MtT = Mt.transpose(-1, -2)
        for i in range(n - 1, -1, -1):
            torch.baddbmm(dS_from_o[i], MtT[i], lam[i + 1], out=lam[i])
        dS0 = lam[0].reshape(B, H, Dk, Dv)
        lam_next = lam[1:].transpose(0, 1).reshape(B, H, n, Dk, Dv)
        dM = lam_next @ starts.transpose(-1, -2)  # [B, H, n, Dk, Dk]
        dY = torch.cat([dM.neg(), lam_next], dim=-1)  # d(Kd^T WU), [B, H, n, Dk, Dk + Dv]
        # Kd^T WU
        dkd = WU @ dY.transpose(-1, -2)  # [B, H, n, C, Dk]
        dWU = kd @ dY  # [B, H, n, C, Dk + Dv]
        # PWU = P WU;  Q' = Qd - PW,  PU
        dPWU = torch.cat([dq_eff.neg(), dO], dim=-1)
        dP = dPWU @ WU.transpose(-1, -2)  # [B, H, n, Cq, C]
        dWU = _addmm(dWU, P.transpose(-1, -2), dPWU)
        # WU = T rhs, T = (I + A)^-1
        drhs = Tinv.transpose(-1, -2) @ dWU
        dA = (drhs @ WU.transpose(-1, -2)).neg_().tril_(-1)
        if gated:
            kkb, qk, dec, gam, gl, tot = ctx.saved_tensors[13:]
            dec_q = dec[..., rows, :]
            dQK = dP * dec_q
            dKKb = dA * dec
            ddec = dA * kkb
            ddec[..., rows, :] += dP * qk
            ddec *= dec
            dgamma = ddec.sum(-1) - ddec.sum(-2)  # dDec_ij / dgamma: +Dec_ij at i, -Dec_ij at j
            dR1 = drhs[..., :Dk]
            dgam = _rowsum(dR1, kb)
            dgam[..., rows] += _rowsum(dq_eff, qc)
            dgamma += dgam * gam
            dgl_gl = _rowsum(dkd, kc) * gl
            dgamma -= dgl_gl
            dgamma[..., -1] += dgl_gl.sum(-1) + dM.diagonal(dim1=-2, dim2=-1).sum(-1) * tot
            dkb = _addmm(dR1 * gam[..., None], dKKb, kc)
            dq = _addmm(dq_eff * gam[..., rows, None], dQK, kc)
            dk = _addmm(_addmm(dkd * gl[..., None], dQK.transpose(-1, -2), qc), dKKb.transpose(-1, -2), kb)
            # gamma = cumsum(g) within the chunk: dg_i = sum_{j >= i} dgamma_j
            dg = dgamma.flip(-1).cumsum(-1).flip(-1)
        else:
            dQK = dP.masked_fill_(upper_rows(C, rows), 0)
            dkb = _addmm(drhs[..., :Dk], dA, kc)
            dq = _addmm(dq_eff, dQK, kc)
            dk = _addmm(_addmm(dkd, dQK.transpose(-1, -2), qc), dA.transpose(-1, -2), kb)
            dg = None
        dR2 = drhs[..., Dk:]
        dv = dR2 * bc[..., None]
        dbeta = _rowsum(dR2, vc) + _rowsum(dkb, kc)
        dk += dkb * bc[..., None]
        grads = [from_chunks(dq, T // every)] + [from_chunks(x, T) for x in (dk, dv, dbeta)]
        grads.append(from_chunks(dg, T) if gated else None)
        return (*grads, dS0, None, None, None)
