"""Fixed-point RNNs and Bedouin (Movahedi et al. 2025): the fixed point against the dense RNN computed
directly, the contraction of the iteration, the gradient at the fixed point, chunked evaluation,
iteration counts and bad settings."""

import pytest
import torch

from statetrack import diagnostics
from statetrack.errors import StatetrackError
from statetrack.layers.fixedpoint import Bedouin, FixedPointRNN
from statetrack.models import zoo
from statetrack.ops import diagonal_scan
from statetrack.ops.fixed_point import householder_apply, householder_matrix
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import TrainConfig, Trainer


def mixer(spec: dict, d_model: int):
    spec = zoo.resolve(spec)
    return zoo.get_entry(spec["name"]).mixer(d_model, **{k: v for k, v in spec.items() if k != "name" and k not in zoo.MODEL_DEFAULTS})


def fp(r=1, d=8, **kw):
    m = FixedPointRNN(d, reflections=r, **kw).double().eval()
    m.tol = 1e-13
    return m


@pytest.mark.parametrize("r", [1, 2, 4])
def test_householder_product_applied_equals_the_materialised_matrix(r):
    torch.manual_seed(0)
    u = torch.nn.functional.normalize(torch.randn(5, r, 6, dtype=torch.float64), dim=-1)
    alpha = torch.rand(5, r, dtype=torch.float64)
    v = torch.randn(5, 6, dtype=torch.float64)
    Q = householder_matrix(u, alpha)
    torch.testing.assert_close(householder_apply(v, u, alpha), (Q @ v[..., None])[..., 0])
    # one reflection: eigenvalue 1 - 2 alpha along u (negative for alpha > 1/2), 1 elsewhere
    Q1 = householder_matrix(u[:, :1], torch.full((5, 1), 0.9, dtype=torch.float64))
    eig = torch.linalg.eigvalsh(Q1)
    torch.testing.assert_close(eig[:, 0], torch.full((5,), -0.8, dtype=torch.float64))
    torch.testing.assert_close(eig[:, 1:], torch.ones(5, 5, dtype=torch.float64))


@pytest.mark.parametrize("r", [1, 2, 4])
def test_fixed_point_equals_the_dense_rnn_computed_directly(r):
    """(Lambda + D Q) h_t = Lambda h_{t-1} + D Q b_t solved per step, Q_t materialised, float64."""
    torch.manual_seed(r)
    m = fp(r)
    with torch.no_grad():
        m.in_proj.weight.mul_(3)  # alphas across (0, 1): reflections with negative eigenvalues
    x = torch.randn(3, 25, 8, dtype=torch.float64)
    h0 = torch.randn(3, 8, dtype=torch.float64)
    with torch.no_grad():
        y, h = m(x, h0)
        y_ref, h_ref = m.dense_reference(x, h0)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)
    assert (m._inputs(x)[3] > 0.5).any()  # some Q_t has a negative eigenvalue


def test_without_input_normalisation_the_fixed_point_is_q_inverse_lambda():
    """input_scale="none" is eq. 7 as written: the fixed point is h_t = Q_t^-1 Lambda_t h_{t-1} + b_t.
    The iteration contracts there only when lambda is small and I - Q is contractive (alpha < 1/2)."""
    torch.manual_seed(1)
    m = fp(2, input_scale="none", alpha_max=0.25)
    with torch.no_grad():
        m.omega.fill_(0.5)  # lambda = exp(-8 softplus(0.5) Delta) <= 0.8
    x = torch.randn(2, 15, 8, dtype=torch.float64)
    with torch.no_grad():
        y, h = m(x)
        b, lam, u, alpha, gate, _ = m._inputs(x)
        Q = householder_matrix(u, alpha)
        state = torch.zeros(2, 8, dtype=torch.float64)
        for t in range(15):
            state = torch.linalg.solve(Q[:, t], (lam[:, t] * state)[..., None])[..., 0] + b[:, t]
    torch.testing.assert_close(h, state, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("input_scale", ["delta", "none"])
def test_dense_reference_for_every_input_scale(input_scale):
    """M_t h_t = Lambda_t h_{t-1} + D_t Q_t b_t with M_t = I - D_t (I - Q_t), on instances where the
    iteration contracts (lambda small, alpha < 1/2); the eigenvalues come from the same matrices."""
    torch.manual_seed(2)
    m = fp(2, input_scale=input_scale, alpha_max=0.25)
    m.eval_max_iter = 500
    with torch.no_grad():
        m.omega.fill_(3.0)  # c softplus(3) ~ 24: lambda = exp(-24 Delta)
        m.in_proj.bias.zero_()  # Delta = sigmoid(W x) around 1/2, lambda ~ 1e-5
    x = torch.randn(2, 12, 8, dtype=torch.float64)
    with torch.no_grad():
        y, h = m(x)
        y_ref, h_ref = m.dense_reference(x)
        A = m.transition_matrices(x)[:, :, 0]
    assert diagnostics.drain(m)["iterations"][0] < 500
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-9, atol=1e-10)
    b, lam, u, alpha, _, D = m._inputs(x)
    Q = householder_matrix(u, alpha)
    eye = torch.eye(8, dtype=torch.float64)
    torch.testing.assert_close((eye - D[..., None] * (eye - Q)) @ A, torch.diag_embed(lam))


def _residuals(m, x, n=30):
    b, lam, u, alpha, _, _ = m._inputs(x)
    h, out = torch.zeros_like(b), []
    for _ in range(n):
        new = diagonal_scan(lam, (1 - lam) * (householder_apply(b - h, u, alpha) + h))[0]
        out.append((new - h).abs().max().item())
        h = new
    return out


@pytest.mark.parametrize("r", [1, 2, 4])
def test_the_residual_falls_monotonically_with_the_normalised_input(r):
    """Thm 3.2's parameterisation (lambda in (0, 1), input scaled by 1 - lambda, Q a product of
    generalised reflections): the change between iterates shrinks at every iteration, to rounding."""
    for trial in range(5):
        torch.manual_seed(100 * r + trial)
        m = fp(r)
        with torch.no_grad():
            m.in_proj.weight.mul_(3)
        res = _residuals(m, torch.randn(2, 30, 8, dtype=torch.float64))
        live = [(a, b) for a, b in zip(res, res[1:]) if a > 1e-13]
        assert len(live) >= 5 and all(b < a for a, b in live), res
        assert res[-1] < 1e-12 * res[0]


def test_one_step_gradient_is_a_descent_direction_when_jacobians_agree():
    """Thm 3.3's setting: f(x, h) = c L^-1 D (x + h) (J_x = J_h, Lipschitz c < 1 in h). The gradient
    that `solve` takes (one differentiable iteration at the fixed point) has a positive inner
    product with the exact gradient of the loss at the fixed point, for random targets."""
    torch.manual_seed(0)
    m = fp(1)
    lam = torch.rand(2, 20, 8, dtype=torch.float64) * 0.95
    c = 0.9

    def step(x):
        return lambda h: (c * diagonal_scan(lam, (1 - lam) * (x + h))[0], None)

    for trial in range(10):
        x = torch.randn(2, 20, 8, dtype=torch.float64, requires_grad=True)
        target = torch.randn(2, 20, 8, dtype=torch.float64)
        m.train()
        m.max_iter = 200
        h, _ = m.solve(step(x), torch.zeros_like(x))
        one_step = torch.autograd.grad(((h - target) ** 2).sum(), x)[0]
        # exact: unroll the iteration to convergence with autograd through every step
        h_exact = torch.zeros_like(x)
        for _ in range(300):
            h_exact = step(x)(h_exact)[0]
        exact = torch.autograd.grad(((h_exact - target) ** 2).sum(), x)[0]
        assert (one_step * exact).sum() > 0


def test_fixed_point_gradient_decreases_the_loss_of_the_layer():
    """On the FP-RNN itself: a small step against the fixed-point gradient lowers the loss, and the
    gradient points the same way as the exact one (through the dense reference)."""
    torch.manual_seed(3)
    m = fp(2).train()
    m.max_iter, m.tol = 100, 1e-12
    x = torch.randn(4, 16, 8, dtype=torch.float64)
    target = torch.randn(4, 16, 8, dtype=torch.float64)
    params = list(m.parameters())
    grads = torch.autograd.grad(((m(x)[0] - target) ** 2).mean(), params)
    exact = torch.autograd.grad(((m.dense_reference(x)[0] - target) ** 2).mean(), params)
    cosine = sum((a * b).sum() for a, b in zip(grads, exact)) / (
        sum((a * a).sum() for a in grads).sqrt() * sum((b * b).sum() for b in exact).sqrt())
    assert cosine > 0.5
    m.eval()
    with torch.no_grad():
        before = ((m(x)[0] - target) ** 2).mean()
        for p, g in zip(params, grads):
            p -= 1e-2 * g
        after = ((m(x)[0] - target) ** 2).mean()
    assert after < before


@pytest.mark.parametrize("r", [1, 2, 4])
def test_bedouin_fixed_point_equals_its_step_by_step_solution(r):
    """Eq. 11 solved one step at a time (linear in y_t given the past), float64, forward and state."""
    torch.manual_seed(r)
    m = Bedouin(8, d_state=4, reflections=r).double().eval()
    m.tol = 1e-13
    x = torch.randn(3, 20, 8, dtype=torch.float64)
    with torch.no_grad():
        y, (h, y_last) = m(x)
        y_ref, (h_ref, y_last_ref) = m.dense_reference(x)
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(y_last, y_last_ref, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", ["fixedpoint", "bedouin"])
def test_chunked_evaluation_equals_the_whole_sequence(name):
    torch.manual_seed(0)
    m = mixer({"name": name, "reflections": 2}, 8).double().eval()
    m.tol = 1e-13
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    with torch.no_grad():
        whole, _ = m(x)
        state, parts = None, []
        for start in range(0, 30, 7):
            y, state = m(x[:, start : start + 7], state)
            parts.append(y)
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=1e-9, atol=1e-10)


def test_iteration_caps_and_counts():
    torch.manual_seed(0)
    x = torch.randn(2, 12, 8)
    m = FixedPointRNN(8, max_iter=3, eval_max_iter=50, tol=1e-9).train()
    m(x)
    assert diagnostics.drain(m) == {"iterations": [3.0, 3.0]}  # per sequence: the cap, the last one differentiable
    m.eval()
    with torch.no_grad():
        m(x)
    counts = diagnostics.drain(m)["iterations"]
    assert len(counts) == 2 and all(3 < count <= 50 for count in counts)
    m = FixedPointRNN(8, max_iter="gamma").train()
    for _ in range(40):
        m(x)
    counts = diagnostics.drain(m)["iterations"]
    assert len(counts) == 80 and len(set(counts)) > 2 and min(counts) >= 1
    assert diagnostics.drain(m) == {}


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("name", ["fixedpoint", "bedouin"])
def test_each_sequence_stops_on_its_own_change(name, native, monkeypatch):
    """Sequences of one batch that need different numbers of iterations (at tol 1e-3): each takes the
    count, and gives the output and the last state, that it takes and gives alone (the compiled pass
    and PyTorch alike)."""
    monkeypatch.setenv("STATETRACK_NATIVE", native)
    torch.manual_seed(1)
    m = mixer({"name": name, "reflections": 2, "tol": 1e-3}, 8).double().eval()
    x = torch.randn(6, 13, 8, dtype=torch.float64) * torch.tensor([0.1, 3, 1, 0.3, 5, 1], dtype=torch.float64)[:, None, None]
    with torch.no_grad():
        y, state = m(x)
        counts = diagnostics.drain(m)["iterations"]
        assert len(counts) == 6 and len(set(counts)) > 1
        for i in range(6):
            y_i, state_i = m(x[i : i + 1])
            assert diagnostics.drain(m)["iterations"] == [counts[i]]
            torch.testing.assert_close(y_i, y[i : i + 1], rtol=1e-12, atol=1e-14)
            for a, b in zip(state_i if name == "bedouin" else [state_i], state if name == "bedouin" else [state]):
                torch.testing.assert_close(a, b[i : i + 1], rtol=1e-12, atol=1e-14)


def test_training_and_evaluation_store_the_iteration_statistics():
    torch.manual_seed(0)
    task = make_task("word_problem", group="Z60")
    model = zoo.build_model({"name": "bedouin", "d_model": 16, "max_iter": 4}, task.vocab_size, task.num_classes)
    config = TrainConfig(steps=4, batch_size=8, min_length=4, max_length=8, log_every=2, early_stop_loss=None, device="cpu")
    trainer = Trainer(model, task, config, progress=False).fit()
    assert len(trainer.curve) == 2
    for point in trainer.curve:  # capped at max_iter = 4 in training
        assert 1 <= point["metrics"]["iterations_median"] <= point["metrics"]["iterations_max"] <= 4
    rows = evaluate_lengths(model, task, [8, 32], Sampling(samples=16, batch_size=8, chunk_size=16))
    for row in rows:
        assert 1 <= row["metrics"]["iterations_median"] <= row["metrics"]["iterations_max"] <= 100
        assert 0 <= row["sequence_accuracy"] <= row["accuracy"] + 1e-9


@pytest.mark.parametrize("params, match", [
    ({"reflections": 0}, "reflections"),
    ({"reflections": 9}, "reflections"),
    ({"max_iter": 0}, "max_iter"),
    ({"max_iter": "poisson"}, "max_iter"),
    ({"eval_max_iter": 0}, "eval_max_iter"),
    ({"tol": 0}, "tol"),
])
def test_bad_settings_are_one_line_errors(params, match):
    with pytest.raises(StatetrackError, match=match):
        mixer({"name": "fixedpoint", **params}, 8)
    if "reflections" not in params or params["reflections"] == 0:
        with pytest.raises(StatetrackError, match=match):
            mixer({"name": "bedouin", **params}, 8)


def test_bedouin_zero_delta_init_starts_delta_input_independent():
    """delta_init="zero" (Movahedi et al. 2025, Sec. 4.5): at init Delta_t is the same at every input,
    so lambda_t does not vary with the input, while the default's Delta_t does; the rest of the
    initialisation is the default's draw, and the Delta weights still learn."""
    torch.manual_seed(0)
    default = Bedouin(8, d_state=4, reflections=2)
    torch.manual_seed(0)
    zero = Bedouin(8, d_state=4, reflections=2, delta_init="zero")
    rows = slice(sum(zero.x_sizes[:4]), sum(zero.x_sizes[:5]))
    assert torch.count_nonzero(zero.x_proj.weight[rows]) == 0
    assert torch.count_nonzero(default.x_proj.weight[rows]) > 0
    others = torch.ones(zero.x_proj.weight.shape[0], dtype=torch.bool)
    others[rows] = False
    torch.testing.assert_close(zero.x_proj.weight[others], default.x_proj.weight[others])
    torch.testing.assert_close(zero.x_proj.bias, default.x_proj.bias)
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        delta_zero, delta_default = (m._inputs_joint(x)[2] for m in (zero, default))
    assert (delta_zero - delta_zero[:1, :1]).abs().max() == 0
    assert (delta_default - delta_default[:1, :1]).abs().max() > 0
    zero(x)[0].sum().backward()
    assert torch.count_nonzero(zero.x_proj.weight.grad[rows]) > 0
    with pytest.raises(StatetrackError, match="delta_init"):
        mixer({"name": "bedouin", "delta_init": "ones"}, 8)


def test_display_names():
    assert zoo.display_name({"name": "fixedpoint", "reflections": 4}) == "FP-RNN r=4"
    assert zoo.display_name({"name": "bedouin"}) == "Bedouin r=1"


@pytest.mark.parametrize("name", ["fixedpoint", "bedouin"])
def test_the_solver_drops_converged_sequences_without_changing_any(name, monkeypatch):
    """Once most sequences of a batch have converged the no-grad loop computes the others alone: the
    outputs, states, gradients and iteration counts equal those of the loop that computes every
    sequence to the end, and the loop did narrow down, twice, to fewer sequences."""
    from statetrack.layers import fixedpoint as layers

    torch.manual_seed(3)
    m = mixer({"name": name, "reflections": 2, "tol": 1e-11, "max_iter": 60}, 8).double().train()
    x = torch.randn(8, 13, 8, dtype=torch.float64) * torch.tensor([0.1, 3, 1, 0.3, 5, 1, 0.2, 2], dtype=torch.float64)[:, None, None]
    widths = []
    solve = layers._FixedPoint.solve

    def watched(self, step, y0, restrict=None):
        def narrowing(rows):
            widths.append(y0.shape[0] if rows is None else len(rows))
            return restrict(rows)
        return solve(self, step, y0, narrowing)

    monkeypatch.setattr(layers._FixedPoint, "solve", watched)
    results = {}
    for compact in (0.0, layers.COMPACT):
        monkeypatch.setattr(layers, "COMPACT", compact)
        widths.clear()
        xc = x.clone().requires_grad_()
        y, state = m(xc)
        y.square().sum().backward()
        results[compact] = (y.detach(), state, xc.grad, diagnostics.drain(m)["iterations"], list(widths))
    (y0, s0, g0, n0, w0), (y1, s1, g1, n1, w1) = results.values()
    assert w0 == [8] and len(w1) >= 3 and w1 == sorted(w1, reverse=True) and len(set(n1)) > 1  # narrowed twice
    assert n0 == n1
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-14)
    for a, b in zip(s1 if name == "bedouin" else [s1], s0 if name == "bedouin" else [s0]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
