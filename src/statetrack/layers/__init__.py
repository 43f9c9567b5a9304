"""Token mixers: nn.Modules with `forward(x [B, T, D], state=None) -> (y [B, T, D], state)`."""

from statetrack.layers.deltanet import DeltaNet, DeltaProduct, GatedDeltaNet
from statetrack.layers.gla import GLA
from statetrack.layers.mamba import Mamba, Mamba2
from statetrack.layers.rnn import LSTM
from statetrack.layers.s4d import IDS4, S4D
from statetrack.layers.transformer import CausalSelfAttention
from statetrack.layers.xlstm import mLSTM, sLSTM

__all__ = [
    "CausalSelfAttention", "DeltaNet", "DeltaProduct", "GLA", "GatedDeltaNet", "IDS4", "LSTM",
    "Mamba", "Mamba2", "S4D", "mLSTM", "sLSTM",
]
