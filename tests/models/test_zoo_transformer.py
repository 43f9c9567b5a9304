"""The Transformer baseline: causal mask, KV-cache chunking, positional encodings."""

import pytest
import torch

from statetrack import StatetrackError
from statetrack.layers.transformer import CausalSelfAttention, rotary
from statetrack.models import zoo


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "rope"])
def test_outputs_at_t_do_not_depend_on_later_inputs(positional):
    torch.manual_seed(0)
    model = zoo.build_model({"name": "transformer", "positional": positional, "d_model": 16, "num_layers": 2}, vocab_size=5, num_classes=3).double()
    tokens = torch.randint(0, 5, (3, 12))
    changed = tokens.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 5
    out, _ = model(tokens)
    out_changed, _ = model(changed)
    torch.testing.assert_close(out[:, :7], out_changed[:, :7], rtol=1e-12, atol=1e-12)
    assert (out[:, 7:] - out_changed[:, 7:]).abs().max() > 1e-6  # later outputs do see the change


@pytest.mark.parametrize("positional", ["none", "sinusoidal", "rope"])
def test_kv_cache_chunks_equal_the_whole_sequence(positional):
    torch.manual_seed(1)
    model = zoo.build_model({"name": "transformer", "positional": positional, "d_model": 16, "num_layers": 2}, vocab_size=5, num_classes=3).double()
    tokens = torch.randint(0, 5, (2, 13))
    whole, _ = model(tokens)
    state, pieces = None, []
    for start, stop in ((0, 5), (5, 6), (6, 13)):
        out, state = model(tokens[:, start:stop], state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), whole, rtol=1e-10, atol=1e-10)


def test_nope_attention_is_permutation_invariant_over_the_past_but_rope_is_not():
    """Without positions the last output depends only on the multiset of earlier tokens."""
    torch.manual_seed(2)
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    swapped = x[:, [1, 0, 2, 3, 4, 5]]
    nope, rope = CausalSelfAttention(8, 2, "none").double(), CausalSelfAttention(8, 2, "rope").double()
    rope.load_state_dict(nope.state_dict())
    torch.testing.assert_close(nope(x)[0][:, -1], nope(swapped)[0][:, -1])
    assert (rope(x)[0][:, -1] - rope(swapped)[0][:, -1]).abs().max() > 1e-6


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(3)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    score = lambda i, j: (rotary(q, torch.tensor([i])) * rotary(k, torch.tensor([j]))).sum()  # noqa: E731
    torch.testing.assert_close(score(5, 2), score(13, 10))


def test_bad_positional_encoding_names_the_choices():
    with pytest.raises(StatetrackError, match="expected one of: none, sinusoidal, rope"):
        zoo.build_model({"name": "transformer", "positional": "alibi"}, 4, 2)
