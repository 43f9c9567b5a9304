"""Token mixers: nn.Modules with `forward(x [B, T, D], state=None) -> (y [B, T, D], state)`."""

from statetrack.layers.deltanet import DeltaNet
from statetrack.layers.rnn import LSTM

__all__ = ["DeltaNet", "LSTM"]
