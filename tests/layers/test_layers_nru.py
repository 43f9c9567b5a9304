"""The NRU (Chandar et al. 2019) in the one-head form of Anonymous 2025 (App. A.1.4, eq. 5), summed over
heads: the layer against a step-by-step loop of the equations (outputs, final state and gradients, in
float64), chunked evaluation, registration and learning, long inputs, and bad settings."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.layers.rnn import NRU
from statetrack.models import zoo
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import TrainConfig, Trainer

D = 6
CASES = [  # (hidden, memory, heads, normalize)
    (None, 5, 1, False),
    (None, 4, 3, False),
    (9, 7, 3, False),  # hidden != d_model: a linear map back to d_model
    (4, 3, 1, False),
    (None, 5, 1, True),  # write and erase vectors at unit 5-norm (the default)
    (9, 7, 3, True),
]


def randomised(hidden, memory, heads, normalize=False, seed=0):
    """An NRU in float64 with every weight random, the ones reading the memory included (they start
    at zero), at a scale where nothing blows up over a few dozen steps."""
    torch.manual_seed(seed)
    layer = NRU(D, hidden=hidden, memory=memory, heads=heads, normalize=normalize).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.4 / p.shape[-1] ** 0.5)
        layer.gates.bias.add_(0.1)  # most units active, some not: both sides of every ReLU are used
    return layer


def reference(layer, x, h0, m0):
    """Eq. 5 one step at a time, each head written out: z_t = [x_t, h_{t-1}, m_{t-1}],
    h_t = f(W_h z + b_h), alpha_i = f(W_alpha,i z + b), beta_i = f(W_beta,i z + b), v^w_i = f(W_w,i z + b),
    v^e_i = f(W_e,i z + b), m_t = m_{t-1} + sum_i alpha_i v^w_i - beta_i v^e_i, f = ReLU.

    The fused weight's rows are read out as [h | alpha_1..K | beta_1..K | v^w_1 .. v^w_K | v^e_1 .. v^e_K]
    (each v block `memory` rows), its columns as [x | h | m]."""
    H, M, K = layer.hidden, layer.memory, layer.heads
    W, b = layer.gates.weight, layer.gates.bias
    W_h, W_alpha, W_beta, W_w, W_e = W.split([H, K, K, K * M, K * M], dim=0)
    b_h, b_alpha, b_beta, b_w, b_e = b.split([H, K, K, K * M, K * M], dim=0)

    def f(v):
        return torch.clamp(v, min=0)

    def unit(v):  # with `normalize`: v / ||v||_5, written out
        if not layer.normalize:
            return v
        return v / torch.clamp((v.abs() ** 5).sum(dim=-1, keepdim=True) ** 0.2, min=1e-6)

    h, m, ys = h0, m0, []
    for t in range(x.shape[1]):
        z = torch.cat([x[:, t], h, m], dim=1)
        h_new = f(z @ W_h.T + b_h)
        update = torch.zeros_like(m)
        for i in range(K):
            alpha = f(z @ W_alpha[i] + b_alpha[i])[:, None]
            beta = f(z @ W_beta[i] + b_beta[i])[:, None]
            v_w = unit(f(z @ W_w[i * M : (i + 1) * M].T + b_w[i * M : (i + 1) * M]))
            v_e = unit(f(z @ W_e[i * M : (i + 1) * M].T + b_e[i * M : (i + 1) * M]))
            update = update + alpha * v_w - beta * v_e
        h, m = h_new, m + update
        ys.append(h)
    y = torch.stack(ys, dim=1)
    if isinstance(layer.proj, torch.nn.Linear):
        y = y @ layer.proj.weight.T + layer.proj.bias
    return y, (h, m)


@pytest.mark.parametrize("hidden, memory, heads, normalize", CASES)
def test_the_layer_is_eq_5_step_by_step_with_gradients(hidden, memory, heads, normalize):
    layer = randomised(hidden, memory, heads, normalize)
    H = layer.hidden
    x = torch.randn(3, 11, D, dtype=torch.float64, requires_grad=True)
    h0 = torch.rand(3, H, dtype=torch.float64, requires_grad=True)  # a ReLU output: >= 0
    m0 = torch.randn(3, memory, dtype=torch.float64, requires_grad=True)
    y, (h, m) = layer(x, (h0, m0))
    y_ref, (h_ref, m_ref) = reference(layer, x, h0, m0)
    for got, want in ((y, y_ref), (h, h_ref), (m, m_ref)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    assert (m - m0).abs().max() > 1e-2 and (h > 0).any() and (h == 0).any()  # the memory moved; ReLUs on and off
    # gradients of every output and the final state, through both, w.r.t. the input, state and weights
    torch.manual_seed(1)
    weights = [torch.randn_like(t) for t in (y, h, m)]
    inputs = [x, h0, m0, *layer.parameters()]

    def grads(out):
        loss = sum((w * o).sum() for w, o in zip(weights, out))
        return torch.autograd.grad(loss, inputs, retain_graph=True)

    for got, want in zip(grads((y, h, m)), grads((y_ref, h_ref, m_ref))):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    # the memory feeds the hidden state: the first output already depends on m_0
    assert torch.autograd.grad(y[:, 0].sum(), m0)[0].abs().max() > 1e-3


def test_without_a_state_the_recurrence_starts_from_zeros():
    layer = randomised(None, 5, 2)
    x = torch.randn(2, 8, D, dtype=torch.float64)
    y, (h, m) = layer(x)
    y_ref, (h_ref, m_ref) = reference(layer, x, torch.zeros(2, D, dtype=torch.float64), torch.zeros(2, 5, dtype=torch.float64))
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(m, m_ref, rtol=1e-10, atol=1e-10)
    assert h.shape == (2, D) and m.shape == (2, 5)


@pytest.mark.parametrize("hidden, memory, heads, normalize", CASES)
def test_chunked_equals_whole(hidden, memory, heads, normalize):
    layer = randomised(hidden, memory, heads, normalize, seed=2)
    x = torch.randn(2, 19, D, dtype=torch.float64)
    y, (h, m) = layer(x)
    y1, state = layer(x[:, :7])
    y2, (h2, m2) = layer(x[:, 7:], state)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), y, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h2, h, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(m2, m, rtol=1e-12, atol=1e-12)


def test_the_weights_reading_the_memory_start_at_zero():
    """The initialisation departure: at the start the memory is written but not read."""
    torch.manual_seed(0)
    layer = NRU(D, memory=5, heads=2)
    reads_memory = layer.gates.weight[:, D + D :]
    assert reads_memory.shape == (D + 2 * 2 * (1 + 5), 5) and torch.equal(reads_memory, torch.zeros_like(reads_memory))
    assert layer.gates.weight[:, : D + D].abs().min() > 0


def test_registered_with_its_defaults():
    assert zoo.mixer_parameters("nru") == {"hidden": None, "memory": 256, "heads": 1, "normalize": True}
    assert zoo.display_name({"name": "nru", "heads": 4}) == "NRU"
    assert zoo.get_entry("nru").mixer is NRU and zoo.get_entry("nru").recurrent
    model = zoo.build_model({"name": "nru", "d_model": 8, "memory": 16, "heads": 2, "hidden": 12}, vocab_size=5, num_classes=3)
    (mixer,) = [m for m in model.modules() if isinstance(m, NRU)]
    assert (mixer.hidden, mixer.memory, mixer.heads) == (12, 16, 2)


def test_a_model_stays_finite_on_long_inputs():
    torch.manual_seed(0)
    model = zoo.build_model({"name": "nru", "d_model": 32}, vocab_size=5, num_classes=3)
    with torch.no_grad():
        logits, _ = model(torch.randint(0, 5, (4, 2000)))
    assert torch.isfinite(logits).all()


def test_a_one_layer_nru_learns_parity():
    task = make_task("parity")  # chance 1/2
    torch.manual_seed(0)
    model = zoo.build_model({"name": "nru", "d_model": 32}, task.vocab_size, task.num_classes)
    config = TrainConfig(steps=300, batch_size=64, lr=1e-3, min_length=2, max_length=6, early_stop_loss=None, device="cpu")
    Trainer(model, task, config, progress=False).fit()
    result = evaluate_lengths(model, task, [6], Sampling(samples=256))[0]
    assert result["scaled_accuracy"] > 0.8, result


@pytest.mark.parametrize("kwargs, name", [
    ({"memory": 0}, "memory"),
    ({"memory": -3}, "memory"),
    ({"memory": 8.0}, "memory"),
    ({"memory": "8"}, "memory"),
    ({"heads": 0}, "heads"),
    ({"heads": 1.5}, "heads"),
    ({"heads": True}, "heads"),
    ({"hidden": 0}, "hidden"),
    ({"hidden": 2.5}, "hidden"),
    ({"normalize": 1}, "normalize"),
])
def test_bad_settings_are_one_line_errors_naming_the_parameter(kwargs, name):
    with pytest.raises(StatetrackError, match=rf"^NRU {name} must be") as error:
        zoo.build_model({"name": "nru", "d_model": 8, **kwargs}, 4, 2)
    assert "\n" not in str(error.value) and repr(next(iter(kwargs.values()))) in str(error.value)
