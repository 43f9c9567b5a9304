"""A paper section and measured figures shared by the claims' and the reports' tests."""

PAPER = {
    "source": "Grazzi et al. 2025, parity table",
    "metric": "scaled accuracy on test lengths 40..256",
    "lengths": [40, 256],
    "figures": {"DeltaNet [-1,1]": 1.0, "DeltaNet [0,1]": 0.017, "Transformer": "fails"},
    "claims": [
        {"text": "DeltaNet [-1,1] extrapolates", "model": "DeltaNet [-1,1]", "at_least": 0.9},
        {"text": "DeltaNet [0,1] does not", "model": "DeltaNet [0,1]", "below": 0.2},
        {"text": "DeltaNet [-1,1] holds at 1000", "model": "DeltaNet [-1,1]", "lengths": 1000, "at_least": 0.9},
        {"text": "the negative range helps", "model": "DeltaNet [-1,1]", "beats": "DeltaNet [0,1]"},
        {"text": "the LSTM extrapolates too", "model": "LSTM", "at_least": 0.9},
        {"text": "the Transformer fails", "model": "Transformer", "below": 0.5},
    ],
}
# scaled accuracy per length of each (model, seed): DeltaNet [-1,1] exact to 256 but not at 1000,
# DeltaNet [0,1] at chance; the LSTM is planned but has not finished; no Transformer in this run
MEASURED = {
    ("DeltaNet [-1,1]", 0): {40: 1.0, 256: 0.96, 1000: 0.5},
    ("DeltaNet [-1,1]", 1): {40: 1.0, 256: 0.90, 1000: 0.3},
    ("DeltaNet [0,1]", 0): {40: 0.05, 256: 0.0, 1000: 0.0},
}
