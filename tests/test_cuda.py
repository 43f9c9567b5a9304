"""The CUDA path: every registered model on a GPU against the CPU in float64, the trainer and its
checkpoints across devices, chunked evaluation, and one experiment end to end.

Marked `cuda`: without a GPU every test here is skipped (CI has none); `make test-cuda` runs them
on a machine with one.
"""

import copy
import json

import pytest
import torch

from statetrack.models import zoo
from statetrack.tasks import make_task
from statetrack.training.evaluate import Sampling, evaluate_lengths
from statetrack.training.train import TrainConfig, Trainer, read_checkpoint

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SWITCHED = sorted(n for n in zoo.MODELS if "eig_range" in zoo.resolve({"name": n}))
CASES = ([(name, {}) for name in sorted(zoo.MODELS)]
         + [(name, {"eig_range": "[-1,1]"}) for name in SWITCHED]
         + [("bilinear", {"structure": s}) for s in ("cp", "block", "rotation", "diagonal")])
# fixed-point layers iterate to a tolerance: iterate to rounding instead, so that both devices reach
# the same fixed point rather than stopping after different numbers of iterations
FIXED_POINT = {"tol": 1e-12, "max_iter": 60, "eval_max_iter": 60}
TASK = make_task("word_problem", group="S3")


def _spec(name: str, settings: dict) -> dict:
    spec = {"name": name, "d_model": 16, "num_layers": 2, **settings}
    if name in ("bedouin", "fixedpoint"):
        spec.update(FIXED_POINT)
    return spec


def _id(case) -> str:
    name, settings = case
    return name + "".join(f"-{v}" for v in settings.values())


def _error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return (actual.detach().double().cpu() - expected.detach()).abs().max().item()


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, cpu_float32: torch.Tensor | None = None,
           tol: float = 2e-3) -> None:
    """float32 on the GPU against float64 on the CPU: within `tol` of the reference's scale, or within
    4 times the error of the same model in float32 on the CPU (`cpu_float32`), for models whose own
    float32 arithmetic strays further (a normalisation of a small vector, a long recurrence)."""
    scale = max(1.0, expected.abs().max().item())
    bound = max(tol * scale, 4 * _error(cpu_float32, expected) if cpu_float32 is not None else 0.0)
    error = _error(actual, expected)
    assert error <= bound, f"{what}: max error {error:.3g}, allowed {bound:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_backward_and_carried_state_on_cuda_equal_the_cpu_in_float64(case):
    torch.manual_seed(0)
    spec = _spec(*case)
    reference = zoo.build_model(spec, TASK.vocab_size, TASK.num_classes).double()
    cpu32 = copy.deepcopy(reference).float()
    model = copy.deepcopy(reference).float().cuda()
    tokens = torch.randint(0, TASK.vocab_size, (3, 12))
    expected, _ = reference(tokens)
    on_cpu, _ = cpu32(tokens)
    logits, _ = model(tokens.cuda())
    _close(logits, expected, "logits", on_cpu)
    # the sequence in two chunks, the state carried from the first to the second
    first, state = model(tokens[:, :5].cuda())
    second, _ = model(tokens[:, 5:].cuda(), state)
    _close(torch.cat([first, second], 1), expected, "logits with carried state", on_cpu)
    # gradients of one loss through all three
    for out in (expected, on_cpu, logits):
        out.log_softmax(-1)[..., 0].mean().backward()
    for (name, p_ref), (_, p32), (_, p) in zip(reference.named_parameters(), cpu32.named_parameters(), model.named_parameters()):
        if p_ref.grad is None:
            assert p.grad is None or not p.grad.any(), name
            continue
        _close(p.grad, p_ref.grad, f"gradient of {name}", p32.grad)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_chunked_evaluation_on_cuda_equals_the_whole_input(case):
    torch.manual_seed(0)
    model = zoo.build_model(_spec(*case), TASK.vocab_size, TASK.num_classes).cuda()
    whole = evaluate_lengths(model, TASK, [200], Sampling(samples=16, chunk_size=None))
    chunked = evaluate_lengths(model, TASK, [200], Sampling(samples=16, chunk_size=48))
    assert abs(whole[0]["accuracy"] - chunked[0]["accuracy"]) <= 1 / (16 * 200) + 1e-9


def test_training_on_cuda_and_its_checkpoint_on_the_cpu(tmp_path):
    torch.manual_seed(0)
    task = make_task("parity")
    spec = {"name": "deltanet", "eig_range": "[-1,1]", "d_model": 16}
    model = zoo.build_model(spec, task.vocab_size, task.num_classes)
    config = TrainConfig(steps=30, batch_size=16, lr=1e-2, min_length=3, max_length=10, device="cuda",
                         early_stop_loss=None, checkpoint_every=10, log_every=10)
    trainer = Trainer(model, task, config, checkpoint_path=tmp_path / "run.pt", progress=False).fit()
    assert trainer.step == 30 and next(trainer.model.parameters()).is_cuda
    on_cpu = zoo.build_model(spec, task.vocab_size, task.num_classes)
    saved = read_checkpoint(tmp_path / "run.pt", "cpu", on_cpu)
    on_cpu.load_state_dict(saved["model"])
    assert all(not t.is_cuda for t in saved["model"].values())
    tokens = task.sample(8, 10, torch.Generator().manual_seed(1)).inputs
    _close(trainer.model(tokens.cuda())[0], on_cpu.double()(tokens)[0], "the CPU copy of a CUDA checkpoint", on_cpu.float()(tokens)[0])
    # and training continues on the GPU from the checkpoint
    config = TrainConfig(**{**config.model_dump(), "steps": 40})
    resumed = Trainer(zoo.build_model(spec, task.vocab_size, task.num_classes), task, config,
                      checkpoint_path=tmp_path / "run.pt", progress=False)
    resumed.load(tmp_path / "run.pt")
    assert resumed.fit().step == 40


def test_an_experiment_runs_end_to_end_on_cuda(tmp_path, capsys):
    from cli_helpers import run_cli

    code, out, err = run_cli(capsys, "run", "demo", "--device", "cuda", "--results-dir", str(tmp_path), "--no-progress",
                             "train.steps=200", "seeds=[0]", "eval.samples=64", "eval.lengths=[40,256]")
    assert code == 0, err
    rows = json.loads(run_cli(capsys, "results", "demo_train.steps-200_seeds-0_eval.samples-64_eval.lengths-40-256",
                              "--json", "--results-dir", str(tmp_path))[1])
    assert {r["model"] for r in rows} == {"DeltaNet [-1,1]", "DeltaNet [0,1]", "LSTM"} and {r["length"] for r in rows} == {40, 256}
    assert (tmp_path / "demo_train.steps-200_seeds-0_eval.samples-64_eval.lengths-40-256" / "report.html").is_file()
