"""PFSA-SR permutation tracking (Siems et al. 2026, section 4.1 and appendix C).

A list of n positions holds the n elements 0..n-1, starting in order (the identity). Each
token is either a noisy shuffle `swap(i,j)?` (the contents of positions i and j are exchanged
with probability 1 - noise, nothing happens otherwise: a convex combination of permutation
matrices) or a reveal `p[i]=j` ("position i holds element j", always true of the hidden state).
The exact belief over S_n after each token is tracked by the PFSA-SR update
b_{t+1} = f(T_s Z_s b_t), f(x) = x / ||x||_1 (reveals: Z_s zeroes inconsistent states; shuffles:
T_s column-stochastic), which renormalises at every step and is therefore exact at any length.
"""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.tasks.base import PAD, Batch, Task
from statetrack.tasks.groups import get_group
from statetrack.tasks.registry import register_task

MAX_N = 6  # 720 joint states; the exact tracker keeps [B, n!] beliefs


@register_task("pfsa")
class PermutationPFSA(Task):
    """Probabilistic permutation shuffles with partial reveals; exact belief targets (Siems et al. 2026).

    Each token is a reveal with probability `reveal_prob`, else a noisy swap of a uniformly
    random pair of positions that fails with probability `noise`. States are the n!
    arrangements q (q[i] = element at position i), indexed as the permutations of
    `statetrack.tasks.groups` (identity = 0). `belief="joint"` (default for n <= 5):
    `soft_targets` [B, T, n!] is the exact posterior over arrangements after each token and the
    class target is the hidden arrangement. `belief="marginal"` (default for n > 5):
    `soft_targets` [B, T, n, n] is the exact marginal P(position i holds element j) (a doubly
    stochastic matrix) and the class target is the hidden element at position 0. Every position
    is supervised. `length` = number of tokens.

    Training minimises KL(belief || model) to the exact belief over the answer classes (the joint
    posterior, or the distribution of the element at position 0 in marginal mode), and evaluation
    adds the metric `tv_distance`, the total-variation distance between the two (0: the model holds
    the exact belief). Accuracy stays against the hidden arrangement, so even the exact belief
    scores below 1 wherever the hidden state is uncertain.
    """

    summary = "noisy swaps + reveals of a permutation; exact belief targets (PFSA-SR, Siems et al. 2026)"

    def __init__(self, n: int = 4, noise: float = 0.5, reveal_prob: float = 0.3, belief: str = "auto"):
        self.n = self.check_int(self.name, "n", n, 2, limits.MAX_CLASSES)
        if n > MAX_N:
            raise StatetrackError(
                f"task {self.name!r}: n must be an integer <= {MAX_N} (exact joint tracking), got {n!r}"
            )
        for label, value in (("noise", noise), ("reveal_prob", reveal_prob)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise StatetrackError(f"task {self.name!r}: {label} must be a number in [0, 1], got {value!r}")
        if belief not in ("auto", "joint", "marginal"):
            raise StatetrackError(f"task {self.name!r}: belief must be 'auto', 'joint' or 'marginal', got {belief!r}")
        self.noise, self.reveal_prob, self.belief = float(noise), float(reveal_prob), belief
        self.mode = ("joint" if n <= 5 else "marginal") if belief == "auto" else belief
        group = get_group(f"S{n}")
        self.states = group.elements  # tuples, identity first
        arrangements = torch.tensor(self.states, dtype=torch.long)  # [N, n]
        self.pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        # after[s, q]: the arrangement after swapping the contents of pair s in arrangement q;
        # (swap * q)(k) = q(swap(k)), the group product with the swap applied first.
        swaps = [group.index(tuple(j if k == i else i if k == j else k for k in range(n))) for i, j in self.pairs]
        self.after = group.table[torch.tensor(swaps)]  # [P, N]
        # consistent[i, j, q]: arrangement q has element j at position i
        self.consistent = (arrangements.T[:, None, :] == torch.arange(n)[None, :, None]).double()  # [n, n, N]
        self.onehot = torch.nn.functional.one_hot(arrangements, n).reshape(len(self.states), n * n).double()  # [N, n*n]
        self.vocab = (
            [PAD] + [f"swap({i},{j})?" for i, j in self.pairs] + [f"p[{i}]={j}" for i in range(n) for j in range(n)]
        )
        self.answers = (
            [" ".join(map(str, q)) for q in self.states] if self.mode == "joint" else [str(j) for j in range(n)]
        )
        self._reveal0 = 1 + len(self.pairs)

    # ---- the loss and metric of a belief task ---------------------------------------------------
    has_metrics = True

    def _belief(self, batch: Batch) -> torch.Tensor:
        """The exact distribution over the answer classes [B, T, C]: the joint belief, or in marginal
        mode the distribution of the element at position 0 (row 0 of the marginal matrix)."""
        soft = batch.soft_targets
        assert soft is not None  # this task's batches carry their exact beliefs
        return soft if self.mode == "joint" else soft[..., 0, :]

    def loss(self, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """KL(b || softmax(logits)) to the exact belief b at the supervised positions (Siems et al. 2026
        train on the beliefs), and the accuracy against the hidden arrangement."""
        log_q = logits[batch.mask].float().log_softmax(-1)
        belief = self._belief(batch)[batch.mask].to(log_q.dtype)
        loss = torch.nn.functional.kl_div(log_q, belief, reduction="batchmean")
        accuracy = (log_q.argmax(-1) == batch.targets[batch.mask]).float().mean()
        return loss, accuracy

    def metrics(self, probabilities: torch.Tensor, batch: Batch) -> dict[str, float]:
        """`tv_distance`: the total-variation distance 1/2 sum |b - q| between the exact belief and the
        predicted distribution, averaged over the supervised positions (0: the belief exactly)."""
        belief = self._belief(batch)[batch.mask].to(probabilities.dtype)
        return {"tv_distance": 0.5 * (probabilities[batch.mask] - belief).abs().sum(-1).mean().item()}

    def decode_token(self, token: int) -> tuple[str, int, int]:
        """("swap", i, j) or ("reveal", position, element) for a token id."""
        if token >= self._reveal0:
            return ("reveal",) + divmod(token - self._reveal0, self.n)
        return ("swap",) + self.pairs[token - 1]

    def track(
        self, inputs: torch.Tensor, renormalise: bool = True, dtype=torch.float64, marginal: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Belief recurrence over the joint state for token ids `inputs` [B, T].

        Returns (beliefs [B, T, n!], or [B, T, n, n] marginals with `marginal`; norms [B, T]): with
        `renormalise` the PFSA-SR update b = f(T Z b) (norms are then the per-step survival
        probabilities s_t); without it the linear recurrence h = T Z h of Siems et al. 2026, whose
        norm ||h_t||_1 = prod_k s_k decays geometrically and underflows at a predictable length.
        """
        b_size, length = inputs.shape
        h = torch.zeros(b_size, len(self.states), dtype=dtype)
        h[:, 0] = 1.0
        reveal = inputs >= self._reveal0
        pair = (inputs - 1).clamp(0, len(self.pairs) - 1)
        pos, elem = (
            ((inputs - self._reveal0).clamp(min=0)).div(self.n, rounding_mode="floor"),
            (inputs - self._reveal0).clamp(min=0) % self.n,
        )
        consistent, after, onehot = self.consistent.to(dtype), self.after, self.onehot.to(dtype)
        per_step, norms = [], []
        for t in range(length):
            shuffled = (1 - self.noise) * h.gather(1, after[pair[:, t]]) + self.noise * h  # swaps are involutions
            revealed = h * consistent[pos[:, t], elem[:, t]]
            h = torch.where(reveal[:, t, None], revealed, shuffled)
            norm = h.sum(dim=1)
            if renormalise:
                h = h / norm[:, None]
            per_step.append(h @ onehot if marginal else h)
            norms.append(norm)
        beliefs = torch.stack(per_step, dim=1)
        if marginal:
            beliefs = beliefs.reshape(b_size, length, self.n, self.n)
        return beliefs, torch.stack(norms, dim=1)

    def marginals(self, joint: torch.Tensor) -> torch.Tensor:
        """[..., n!] joint beliefs -> [..., n, n] marginals P(position i holds element j)."""
        return (joint.double() @ self.onehot).reshape(*joint.shape[:-1], self.n, self.n).to(joint.dtype)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        b, n, g = batch_size, self.n, generator
        is_reveal = torch.rand(b, length, generator=g) < self.reveal_prob
        pair = torch.randint(0, len(self.pairs), (b, length), generator=g)
        position = torch.randint(0, n, (b, length), generator=g)
        happens = torch.rand(b, length, generator=g) >= self.noise
        arrangements = torch.tensor(self.states, dtype=torch.long)
        state = torch.zeros(b, dtype=torch.long)  # hidden arrangement, starts at the identity
        inputs = torch.empty(b, length, dtype=torch.long)
        hidden = torch.empty(b, length, dtype=torch.long)
        for t in range(length):
            element = arrangements[state, position[:, t]]
            inputs[:, t] = torch.where(is_reveal[:, t], self._reveal0 + position[:, t] * n + element, 1 + pair[:, t])
            moved = self.after[pair[:, t], state]
            state = torch.where(~is_reveal[:, t] & happens[:, t], moved, state)
            hidden[:, t] = state
        beliefs, _ = self.track(inputs, marginal=self.mode == "marginal")
        targets = hidden if self.mode == "joint" else arrangements[hidden, 0]
        soft = beliefs.float()
        return Batch(inputs, targets, torch.ones_like(inputs, dtype=torch.bool), soft)

    def describe(self, batch: Batch, index: int = 0) -> str:
        tokens = " ".join(self.vocab[i] for i in batch.inputs[index].tolist())
        assert batch.soft_targets is not None  # this task's batches carry their exact beliefs
        final = batch.soft_targets[index, -1]
        if self.mode == "joint":
            top = final.topk(min(3, final.numel()))
            belief = ", ".join(
                f"[{self.answers[i]}]: {p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist()) if p > 0
            )
            return f"{tokens}\n  final belief (top): {belief}; hidden: [{self.answers[int(batch.targets[index, -1])]}]"
        rows = "; ".join(" ".join(f"{p:.2f}" for p in row) for row in final.tolist())
        return f"{tokens}\n  final marginals P(pos i holds j): {rows}"
