"""SequenceModel: embedding -> L x Block(mixer [+ MLP]) -> norm -> readout (one file, top to bottom);
or, with the plain stack, embedding -> L x (mixer [-> MLP]) -> readout."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from statetrack.layers.registry import FrozenInput


class MLP(nn.Module):
    """Position-wise feed-forward: Linear(d, e d) -> GELU -> Linear(e d, d)."""

    def __init__(self, d_model: int, expand: int = 4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, expand * d_model), nn.GELU(), nn.Linear(expand * d_model, d_model))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    """Pre-norm residual block: x + mixer(norm(x)), then x + mlp(norm(x)) when `mlp`."""

    def __init__(self, d_model: int, mixer: nn.Module, mlp: bool):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(d_model) if mlp else None
        self.mlp = MLP(d_model) if mlp else None

    def forward(self, x, state=None):
        y, state = self.mixer(self.norm1(x), state)
        x = x + y
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x))
        return x, state


class PlainBlock(nn.Module):
    """No norm and no residual: mixer(x), then mlp of that when `mlp`. One of these between an
    embedding and a linear readout is "a single recurrent cell followed by a linear classification
    head" (Ebrahimi & Memisevic 2025), the form in which the papers train torch's recurrent cells."""

    def __init__(self, d_model: int, mixer: nn.Module, mlp: bool):
        super().__init__()
        self.mixer = mixer
        self.mlp = MLP(d_model) if mlp else None

    def forward(self, x, state=None):
        y, state = self.mixer(x, state)
        return (y if self.mlp is None else self.mlp(y)), state


STACKS = ("residual", "plain")  # pre-norm residual blocks and a final norm; or neither


class SequenceModel(nn.Module):
    """Token ids [B, T] -> class logits [B, T, num_classes], with a per-layer state.

    `forward(tokens, state)` returns `(logits, state)`; passing the returned state with the next
    chunk of tokens continues the sequence, which is how long inputs are evaluated in chunks.
    `stack`: "residual" (pre-norm residual `Block`s, a LayerNorm before the readout) or "plain"
    (`PlainBlock`s and no norm: the mixers' outputs feed each other and the readout directly).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        make_mixer: Callable[[], nn.Module],
        d_model: int = 64,
        num_layers: int = 1,
        mlp: bool = True,
        stack: str = "residual",
    ):
        super().__init__()
        if stack not in STACKS:
            raise ValueError(f"stack must be one of {', '.join(STACKS)}, got {stack!r}")
        block = Block if stack == "residual" else PlainBlock
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([block(d_model, make_mixer(), mlp) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model) if stack == "residual" else nn.Identity()
        self.readout = nn.Linear(d_model, num_classes)
        first = self.blocks[0] if num_layers else None
        if first is not None and isinstance(first.mixer, FrozenInput) and first.mixer.frozen_input:
            # a mixer with a frozen recurrence (e.g. the frozen bilinear RNN) is fed by frozen weights too:
            # its input x = LayerNorm(embedding) decides the transitions, so training them would train the recurrence
            self.embedding.requires_grad_(False)
            if isinstance(first, Block):
                first.norm1.requires_grad_(False)

    def forward(self, tokens: torch.Tensor, state: list | None = None, keep_state: bool = True):
        """`keep_state=False` for a caller that reads the logits alone: each layer's state is let go
        once the next layer runs (a Transformer's key-value cache, [B, H, T, D] twice per layer, would
        otherwise be held for every layer to the end of the pass), and the state returned is None."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}")
        state = state if state is not None else [None] * len(self.blocks)
        x = self.embedding(tokens)  # [B, T, D]
        new_state = []
        for block, s in zip(self.blocks, state):
            x, s = block(x, s)
            if keep_state:
                new_state.append(s)
        return self.readout(self.norm(x)), (new_state if keep_state else None)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
