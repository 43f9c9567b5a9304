"""The PaTH attention layer (Yang et al. 2025b): its projections fed to fla's naive form give its
outputs, beta spans the eigenvalue range asked for, every variant's cache carries, bad settings are
one-line errors."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, load_fla_naive, randomised, rel_error
from statetrack.errors import StatetrackError
from statetrack.layers.path_attention import PaTHAttention
from statetrack.models import zoo

D = 16


def fla_layer_output(layer: PaTHAttention, x: torch.Tensor, fla) -> torch.Tensor:
    """fla's PaTHAttention forward written out from the layer's weights (fla's layer needs triton):
    q, k, v, w projections; w through the depthwise convolution and SiLU, L2-normalised; beta =
    s sigmoid; g = log sigmoid; fla's naive_path_attn at scale 1/sqrt(D); the output projection."""
    B, T, _ = x.shape
    H, Dh = layer.num_heads, layer.head_dim
    Wq, Wk, Wv = layer.qkv.weight.chunk(3, dim=0)
    q, k, v = (x @ W.T for W in (Wq, Wk, Wv))
    w = x @ layer.w_proj.weight.T
    if layer.conv is not None:
        w = F.conv1d(F.pad(w.transpose(1, 2), (layer.short_conv - 1, 0)), layer.conv.conv.weight, groups=D)
        w = F.silu(w.transpose(1, 2))
    w = F.normalize(w.view(B, T, H, Dh), dim=-1)
    beta = layer.scale * torch.sigmoid(layer.b_proj(x))
    g = F.logsigmoid(layer.g_proj(x)) if layer.g_proj is not None else torch.zeros_like(beta)
    heads = (t.reshape(B, T, H, Dh) for t in (q, k, v))
    o = fla.naive_path_attn(*heads, w, beta, g, scale=Dh**-0.5, chunk_size=16)
    return layer.o_proj(o.reshape(B, T, D))


@pytest.mark.parametrize(
    "settings",
    [{}, {"forget_gate": True}, {"eig_range": "[0,1]", "short_conv": 0}, {"num_heads": 4, "forget_gate": True}],
)
def test_layer_is_fla_naive_path_attention_on_its_projections(settings):
    fla = load_fla_naive("path_attn/naive.py")
    layer = randomised(PaTHAttention(D, **settings), std=0.3).float()
    x = torch.randn(2, 23, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y, _ = layer(x)
        assert rel_error(y, fla_layer_output(layer, x, fla)) <= TOL[torch.float32]


@pytest.mark.parametrize("eig_range, low, high", [("[-1,1]", -1.0, 1.0), ("[0,1]", 0.0, 1.0)])
def test_eig_range_bounds_the_householders_spectrum(eig_range, low, high):
    layer = PaTHAttention(D, eig_range=eig_range).double()
    with torch.no_grad():
        layer.b_proj.bias.copy_(torch.tensor([-30.0, 30.0]))  # beta at both ends of its range
        eig = layer.transition_eigenvalues(torch.randn(1, 5, D, dtype=torch.float64))  # [1, 5, H, D]
    assert eig.min() >= low - 1e-9 and eig.max() <= high + 1e-9
    # head 0 (beta near 0): every eigenvalue 1; head 1 (beta near its top): one eigenvalue 1 - beta at `low`, the rest 1
    assert (eig[..., 0, :] - 1).abs().max() <= 1e-9 and (eig[..., 1, 1:] - 1).abs().max() <= 1e-9
    assert (eig[..., 1, 0] - low).abs().max() <= 1e-6


@pytest.mark.parametrize(
    "settings", [{"forget_gate": True}, {"short_conv": 0}, {"short_conv": 5, "eig_range": "[0,1]"}]
)
def test_every_variant_fed_in_chunks_equals_one_call(settings):
    torch.manual_seed(0)
    layer = randomised(PaTHAttention(D, **settings))
    x = torch.randn(2, 11, D, dtype=torch.float64)
    y, _ = layer(x)
    state, pieces = None, []
    for lo, hi in [(0, 1), (1, 4), (4, 11)]:
        y_part, state = layer(x[:, lo:hi], state)
        pieces.append(y_part)
    assert rel_error(torch.cat(pieces, 1), y) <= 1e-12


def test_outputs_do_not_depend_on_later_inputs():
    layer = randomised(PaTHAttention(D, forget_gate=True))
    x = torch.randn(1, 9, D, dtype=torch.float64)
    changed = x.clone()
    changed[:, 5:] += 1.0
    assert torch.equal(layer(x)[0][:, :5], layer(changed)[0][:, :5])
    assert not torch.allclose(layer(x)[0][:, 5:], layer(changed)[0][:, 5:])


def test_registered_as_attention_with_pats_range_by_default():
    entry = zoo.get_entry("path_attention")
    assert entry.mixer is PaTHAttention and not entry.recurrent
    assert zoo.display_name("path_attention") == "PaTH [-1,1]"
    assert zoo.display_name({"name": "path_attention", "eig_range": "[0,1]"}) == "PaTH [0,1]"


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"eig_range": "[0,2]"}, r"unknown eig_range '\[0,2\]'; expected one of: \[0,1\], \[-1,1\]"),
        ({"forget_gate": "yes"}, "forget_gate must be true or false, got 'yes'"),
        ({"short_conv": -1}, r"short_conv .* must be an integer >= 0, got -1"),
        ({"num_heads": 3}, "d_model 16 is not divisible by num_heads 3"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, match):
    with pytest.raises(StatetrackError, match=match):
        zoo.build_model({"name": "path_attention", "d_model": D, **settings}, 4, 2)
