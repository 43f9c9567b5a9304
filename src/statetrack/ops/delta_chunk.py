"""Chunkwise WY/UT delta rule with a hand-written backward (Yang et al. 2024b; the equations are in delta_rule.py).

Per chunk of C steps (batched over B, H and all chunks), with cumulative log-gate gamma, Dec_ij =
exp(gamma_i - gamma_j) for i >= j, Gam = exp(gamma), Gl = exp(gamma_C - gamma), tot = Gam_C:

    Kb = diag(beta) K,   A = (Kb K^T) (.) Dec,   T = (I + strictly-lower A)^-1,
    W  = T (Kb (.) Gam),   U = T diag(beta) V
    M  = tot I - Kd^T W,   X = Kd^T U,   Kd = Gl (.) K,   S_{n+1} = M_n S_n + X_n   (the only sequential step)
    V' = U - W S_n,   P = lower(Q K^T (.) Dec),   Qd = diag(Gam) Q,   O = Qd S_n + P V'

V' are the chunk's pseudo-values given its start state (S_{n+1} = tot S_n + Kd^T V'). The backward
runs the chunk recurrence in reverse, lambda_n = (Qd^T dO_n - W^T P^T dO_n) + M_n^T lambda_{n+1},
then every chunk-local gradient as one batched product over all chunks:

    dV' = P^T dO + Kd lambda_{n+1},   dP = dO V'^T,   dKd = V' lambda_{n+1}^T,   dU = dV',   dW = -dV' S_n^T,
    dA  = -T^T dT T^T = -((T^T dW) W^T + (T^T dU) U^T)   (strictly lower; no extra C^3 product).

Written through V' the pass takes 27 chunk-sized products where the plain chain rule through
M, X, Q' = Qd - P W and P U takes 30, and it stores fewer intermediates than autograd through the
same forward (no zero-filled buffers for slices and masks).

`every` > 1 reads Q only at every `every`-th step (DeltaProduct: each token's last micro-step): Q,
P, Qd and O then have C / every rows per chunk, at positions `rows`, and chunks hold whole tokens.
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
    """sum(x * y, -1) for real x, y in one call (measured faster than a product and a sum here)."""
    return torch.linalg.vecdot(x, y)


def upper_rows(C: int, rows: torch.Tensor) -> torch.Tensor:
    """Mask [len(rows), C]: True where column j comes after the read position rows[i] (no look-ahead)."""
    return torch.arange(C, device=rows.device)[None, :] > rows[:, None]


def _bmm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y over the leading batch dimensions as one batched gemm."""
    shape = x.shape[:-1] + y.shape[-1:]
    return torch.bmm(_flat(x), _flat(y)).view(shape)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape((-1,) + t.shape[-2:])


def _addmm_(acc: torch.Tensor, x: torch.Tensor, y: torch.Tensor, alpha: float = 1) -> torch.Tensor:
    """acc += alpha x @ y in place (acc contiguous, owned by the caller): no copy of acc, no extra add pass."""
    acc.view((-1,) + acc.shape[-2:]).baddbmm_(_flat(x), _flat(y), alpha=alpha)  # view: fails rather than copy
    return acc


class DeltaRuleChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, beta, g, S0, n, C, every):
        B, T, H, Dk = k.shape
        Dv = v.shape[-1]
        Z = B * H
        Cq, Tq = C // every, T // every  # read positions per chunk and in all
        rows = torch.arange(every - 1, C, every, device=q.device)  # where q is read inside a chunk
        qc = to_chunks(q, n, Cq)  # [B, H, n, Cq, Dk]
        kc, vc = (to_chunks(x, n, C) for x in (k, v))  # [B, H, n, C, D]
        bc = to_chunks(beta, n, C)  # [B, H, n, C]
        gated = g is not None
        kb, vb = kc * bc[..., None], vc * bc[..., None]
        kkb = _bmm(kb, kc.transpose(-1, -2))  # [B, H, n, C, C]
        qk = _bmm(qc, kc.transpose(-1, -2))  # [B, H, n, Cq, C]
        if gated:
            gamma = to_chunks(g, n, C).cumsum(-1)  # [B, H, n, C]
            upper = upper_rows(C, torch.arange(C, device=q.device))
            dec = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(upper, -math.inf).exp()
            gam, gl = gamma.exp(), (gamma[..., -1:] - gamma).exp()
            tot = gam[..., -1]  # [B, H, n]
            A, P = kkb * dec, qk * dec[..., rows, :]
            kbg, qd, kd = kb * gam[..., None], qc * gam[..., rows, None], kc * gl[..., None]
        else:
            A, P = kkb, qk.masked_fill_(upper_rows(C, rows), 0)
            kbg, qd, kd = kb, qc, kc
        Tinv = unit_lower_inverse_nograd(A)
        W, U = _bmm(Tinv, kbg), _bmm(Tinv, vb)  # [B, H, n, C, D]
        kdT = kd.transpose(-1, -2)
        M = _bmm(kdT, W).neg_()  # [B, H, n, Dk, Dk]
        M.diagonal(dim1=-2, dim2=-1).add_(tot[..., None] if gated else 1)
        Mt = M.view(Z, n, Dk, Dk).transpose(0, 1).contiguous()  # time-major [n, Z, Dk, Dk]
        states = q.new_empty(n + 1, Z, Dk, Dv)  # S_0 .. S_n, time-major
        states[0] = S0.reshape(Z, Dk, Dv)
        states[1:] = _bmm(kdT, U).view(Z, n, Dk, Dv).transpose(0, 1)  # X_n, then S_{n+1} = X_n + M_n S_n in place
        for i in range(n):
            states[i + 1].baddbmm_(Mt[i], states[i])
        starts = states[:-1].transpose(0, 1).contiguous().view(B, H, n, Dk, Dv)  # chunk-major, copied once
        Vp = _addmm_(U.clone(), W, starts, alpha=-1)  # V' = U - W S
        o = _addmm_(_bmm(P, Vp), qd, starts)  # O = Qd S + P V'
        o = from_chunks(o, Tq)
        saved = [qc, kc, vc, bc, kb, kbg, qd, P, Tinv, W, U, Vp, kd, Mt, starts, rows]
        if gated:
            saved += [kkb, qk, dec, gam, gl, tot]
        ctx.save_for_backward(*saved)
        ctx.meta = (gated, n, C, T, every)
        final = states[-1].clone().view(B, H, Dk, Dv)  # a copy: a view would keep every chunk's state alive
        return o, final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_o, d_final):
        gated, n, C, T, every = ctx.meta
        qc, kc, vc, bc, kb, kbg, qd, P, Tinv, W, U, Vp, kd, Mt, starts, rows = ctx.saved_tensors[:16]
        B, H, _, _, Dk = qc.shape
        Dv = vc.shape[-1]
        Z = B * H
        d_o = torch.zeros(B, T // every, H, Dv, dtype=qc.dtype, device=qc.device) if d_o is None else d_o
        dO = to_chunks(d_o, n, C // every)  # [B, H, n, Cq, Dv]
        startsT = starts.transpose(-1, -2)
        # O = Qd S + P V',  V' = U - W S
        dqd = _bmm(dO, startsT)  # [B, H, n, Cq, Dk]
        dVp = _bmm(P.transpose(-1, -2), dO)  # the part from O; [B, H, n, C, Dv]
        # reverse chunk recurrence: lam_n = dL/dS_n = (Qd^T dO_n - W^T P^T dO_n) + M_n^T lam_{n+1}, time-major
        lam = torch.empty(n + 1, Z, Dk, Dv, dtype=qc.dtype, device=qc.device)
        local = _addmm_(_bmm(qd.transpose(-1, -2), dO), W.transpose(-1, -2), dVp, alpha=-1)
        lam[:n] = local.view(Z, n, Dk, Dv).transpose(0, 1)
        lam[n] = 0 if d_final is None else d_final.reshape(Z, Dk, Dv)
        MtT = Mt.transpose(-1, -2)
        for i in range(n - 1, -1, -1):
            lam[i].baddbmm_(MtT[i], lam[i + 1])
        dS0 = lam[0].reshape(B, H, Dk, Dv)
        lam_next = lam[1:].transpose(0, 1).contiguous().view(B, H, n, Dk, Dv)
        # S_{n+1} = tot S_n + Kd^T V'
        dVp = _addmm_(dVp, kd, lam_next)
        dkd = _bmm(Vp, lam_next.transpose(-1, -2))  # [B, H, n, C, Dk]
        dP = _bmm(dO, Vp.transpose(-1, -2))  # [B, H, n, Cq, C]
        # W = T Kbg, U = T Vb, T = (I + A)^-1:  dA = -T^T dT T^T = -(dKbg W^T + dVb U^T), strictly lower
        dW = _bmm(dVp, startsT).neg_()  # dU = dV'
        TinvT = Tinv.transpose(-1, -2)
        dkbg, dvb = _bmm(TinvT, dW), _bmm(TinvT, dVp)
        dA = _addmm_(_bmm(dkbg, W.transpose(-1, -2)), dvb, U.transpose(-1, -2)).neg_().tril_(-1)
        if gated:
            kkb, qk, dec, gam, gl, tot = ctx.saved_tensors[16:]
            dec_q = dec[..., rows, :]
            dQK = dP * dec_q
            dKKb = dA * dec
            ddec = dA * kkb
            ddec[..., rows, :] += dP * qk
            ddec *= dec
            dgamma = ddec.sum(-1) - ddec.sum(-2)  # dDec_ij / dgamma: +Dec_ij at i, -Dec_ij at j
            dgam = _rowsum(dkbg, kb)
            dgam[..., rows] += _rowsum(dqd, qc)
            dgamma += dgam * gam
            dgl_gl = _rowsum(dkd, kc) * gl
            dgamma -= dgl_gl
            dtot = _rowsum(lam_next.flatten(-2), starts.flatten(-2))  # trace(dM^T), dM = lam_{n+1} S_n^T
            dgamma[..., -1] += dgl_gl.sum(-1) + dtot * tot
            dkb = _addmm_(dkbg.mul_(gam[..., None]), dKKb, kc)
            dq = _addmm_(dqd.mul_(gam[..., rows, None]), dQK, kc)
            dk = _addmm_(_addmm_(dkd.mul_(gl[..., None]), dQK.transpose(-1, -2), qc), dKKb.transpose(-1, -2), kb)
            # gamma = cumsum(g) within the chunk: dg_i = sum_{j >= i} dgamma_j
            dg = dgamma.flip(-1).cumsum(-1).flip(-1)
        else:
            dQK = dP.masked_fill_(upper_rows(C, rows), 0)
            dkb = _addmm_(dkbg, dA, kc)
            dq = _addmm_(dqd, dQK, kc)
            dk = _addmm_(_addmm_(dkd, dQK.transpose(-1, -2), qc), dA.transpose(-1, -2), kb)
            dg = None
        dv = dvb * bc[..., None]
        dbeta = _rowsum(dvb, vc) + _rowsum(dkb, kc)
        dk.addcmul_(dkb, bc[..., None])
        grads = [from_chunks(dq, T // every)] + [from_chunks(x, T) for x in (dk, dv, dbeta)]
        grads.append(from_chunks(dg, T) if gated else None)
        return (*grads, dS0, None, None, None)
