"""The DeltaFormer layer (Zhong et al. 2025): its projections feed the op as documented, beta's range,
and the default write kernel keeps it finite where the softmax one overflows."""

import pytest
import torch

from ops_helpers import randomised, rel_error
from statetrack.errors import StatetrackError
from statetrack.layers.deltaformer import DeltaFormer
from statetrack.layers.transformer import rotary
from statetrack.ops.deltaformer import WRITE_KERNELS, deltaformer_reference


@pytest.mark.parametrize("write_kernel", WRITE_KERNELS)
@pytest.mark.parametrize("positional", ["rope", "none"])
@pytest.mark.parametrize("eig_range, c", [("[0,1]", 1.0), ("[-1,1]", 2.0)])
def test_layer_is_the_documented_map(eig_range, c, positional, write_kernel):
    layer = randomised(
        DeltaFormer(12, num_heads=3, eig_range=eig_range, positional=positional, write_kernel=write_kernel)
    )
    x = torch.randn(2, 9, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y, (k_cache, u_cache) = layer(x)
    heads = (2, 9, 3, 4)
    q, k, v = ((x @ W.weight.T).view(heads) for W in (layer.q_proj, layer.k_proj, layer.v_proj))
    if positional == "rope":
        q, k = (rotary(t.transpose(1, 2), torch.arange(9)).transpose(1, 2) for t in (q, k))
    beta = c * torch.sigmoid(x @ layer.b_proj.weight.T + layer.b_proj.bias)
    o, (_, u) = deltaformer_reference(q, k, v, beta, write_kernel=write_kernel)
    assert rel_error(y, o.reshape(2, 9, 12) @ layer.o_proj.weight.T) <= 1e-12
    assert rel_error(u_cache, u) <= 1e-12 and rel_error(k_cache, k) <= 1e-12


def test_chunks_with_the_cache_equal_one_call():
    """RoPE positions continue from the cache's length."""
    layer = randomised(DeltaFormer(8, eig_range="[-1,1]"))
    x = torch.randn(3, 13, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y, _ = layer(x)
    y1, state = layer(x[:, :6])
    y2, _ = layer(x[:, 6:], state)
    assert rel_error(torch.cat([y1, y2], 1), y) <= 1e-12


def test_beta_spans_the_range():
    for eig_range, top in (("[0,1]", 1.0), ("[-1,1]", 2.0)):
        layer = randomised(DeltaFormer(8, eig_range=eig_range), std=1.0)
        x = torch.randn(4, 50, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        beta = layer.gates(x)["beta"]
        assert 0 < beta.min() < 0.1 * top and 0.9 * top < beta.max() < top


def test_finite_in_float32_at_4096_tokens_where_the_softmax_write_overflows():
    """Sharp keys (the key projection scaled 16x) and beta near 2 on a two-symbol input, as parity's:
    with the softmax write kernel the transition's eigenvalue along the written feature leaves [-1, 1]
    and the output is no longer finite within 4096 tokens; the same weights with the default gaussian
    kernel (eigenvalue 1 - beta) stay finite and bounded."""
    gen = torch.Generator().manual_seed(1)
    symbols = torch.randn(2, 16, generator=gen)
    x = symbols[torch.randint(0, 2, (1, 4096), generator=gen)]  # [1, 4096, 16] float32
    outputs = {}
    for write_kernel in ("softmax", "gaussian"):
        torch.manual_seed(0)
        layer = DeltaFormer(16, num_heads=2, eig_range="[-1,1]", write_kernel=write_kernel)
        with torch.no_grad():
            layer.k_proj.weight.mul_(16.0)
            layer.b_proj.bias.fill_(4.0)  # beta = 2 sigmoid(4 + ...), near 2
            outputs[write_kernel] = layer(x)
    assert not torch.isfinite(outputs["softmax"][0]).all()
    y, (_, u) = outputs["gaussian"]
    assert torch.isfinite(y).all() and u.abs().max() < 100


def test_bad_parameters_are_one_line_errors():
    with pytest.raises(StatetrackError, match="unknown eig_range"):
        DeltaFormer(8, eig_range="[-2,1]")
    with pytest.raises(StatetrackError, match="not divisible by num_heads 3"):
        DeltaFormer(8, num_heads=3)
    with pytest.raises(StatetrackError, match="unknown positional encoding 'alibi'"):
        DeltaFormer(8, positional="alibi")
    with pytest.raises(StatetrackError, match="rope needs an even head dimension, got 3"):
        DeltaFormer(6, num_heads=2)
    with pytest.raises(StatetrackError, match="unknown write_kernel 'linear'; expected one of: gaussian, softmax"):
        DeltaFormer(8, write_kernel="linear")
