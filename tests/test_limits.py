"""Size bounds (statetrack.limits) and Ray's address check: every shipped spec passes at both scales on
a 24 GiB machine, a setting beyond the estimate is refused until STATETRACK_NO_SIZE_LIMIT lifts it, and
only a gRPC server counts as a reachable Ray cluster."""

import re
import socket
import threading

import pytest

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.experiments.backends import check_reachable
from statetrack.experiments.spec import expand, load_spec, shipped_specs
from statetrack.schema import SCALES


@pytest.mark.parametrize("scale", SCALES)
def test_every_shipped_spec_passes_the_bounds(scale, monkeypatch):
    """With 16 GiB available: a 24 GiB machine with other work on it."""
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 16 * 2**30)
    for name in shipped_specs():
        assert expand(load_spec(name, scale)), name


def test_a_size_beyond_the_bound_is_refused_until_lifted(monkeypatch):
    monkeypatch.delenv(limits.LIFT, raising=False)
    spec = load_spec("demo", "quick", ["eval.samples=1000000000000"])
    with pytest.raises(StatetrackError, match=r"eval\.samples 1000000000000 .* beyond the limit of 1e\+18 .* "
                                              "STATETRACK_NO_SIZE_LIMIT=1"):
        expand(spec)
    monkeypatch.setenv(limits.LIFT, "1")
    assert expand(spec)


def test_memory_estimate_against_the_memory_given(monkeypatch):
    monkeypatch.delenv(limits.LIFT, raising=False)
    spec = load_spec("demo", "quick")
    expand(spec)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**20)  # 1 MiB
    with pytest.raises(StatetrackError, match="would take about .* of memory, more than the 0.000977 GiB available"):
        expand(spec)


def test_a_batch_is_sized_by_its_tokens_one_micro_batch_at_a_time(monkeypatch):
    """repl-traces at the paper scale: 36 traces of 64 commands are 36 x 1,421 tokens through 18 layers
    of width 512, about 36 GiB in one pass (the length alone, 64, would read 1.6 GiB); the spec takes
    the paper's 12 micro-batches of 3, which fit."""
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 16 * 2**30)
    spec = load_spec("repl-traces", "paper", ["train.accumulate=1"])
    message = (r"train\.batch_size 36 in one pass \(train\.accumulate splits it\) at the curriculum's longest length 64 "
               r"\(1,421 tokens\) with model 'deltanet' .* would take about 36\.\d GiB of memory")
    with pytest.raises(StatetrackError, match=message):
        expand(spec)
    assert expand(load_spec("repl-traces", "paper"))


def test_available_memory_is_read():
    assert 0 < limits.available_memory() < 2**62


def test_export_bound(tmp_path, monkeypatch):
    monkeypatch.delenv(limits.LIFT, raising=False)
    limits.check_export_size(1000, [8, 16], tmp_path / "new" / "folder")
    with pytest.raises(StatetrackError, match=r"--samples 10000000000 at --lengths up to 16 is an estimated 894 GiB of files"):
        limits.check_export_size(10**10, [8, 16], tmp_path / "new")
    monkeypatch.setenv(limits.LIFT, "1")
    limits.check_export_size(10**10, [8, 16], tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


def _listening(answer: bytes | None) -> int:
    """The port of a server on 127.0.0.1 that reads what a client sends and answers `answer`."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve():
        with server:
            connection, _ = server.accept()
            with connection:
                connection.recv(100)
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_a_grpc_server_is_a_reachable_cluster(monkeypatch):
    grpc = pytest.importorskip("grpc")
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    server = grpc.server(ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_reachable(f"127.0.0.1:{port}")
        check_reachable(f"ray://127.0.0.1:{port}")
    finally:
        server.stop(None)


def test_another_server_is_no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    port = _listening(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(StatetrackError, match="something answers there, but not a Ray"):
        check_reachable(f"127.0.0.1:{port}")


def test_a_silent_server_times_out(monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()  # accepts (in the kernel's backlog) and never answers
    with server, pytest.raises(StatetrackError, match="no answer within 0.5 s"):
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}", timeout=0.5)


def test_available_memory_counts_the_address_space_limit():
    """Under `ulimit -v` the room left below the limit bounds what is available, not the machine's memory."""
    import subprocess
    import sys

    code = ("import resource; from statetrack import limits; used = limits._vm_size(); "
            "resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY)); "
            "print(limits.available_memory())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) <= 2**30


@pytest.mark.parametrize("check, args, message", [
    (limits.check_tokens, (10**5, 10**4, "tasks show"), "tasks show: 100,000 sequences of 10,000 tokens would take about 29.8 GiB"),
    (limits.check_parameters, (4e9, "models: --params 4e9"), "models: --params 4e9 (4e+09 parameters) would take about 59.6 GiB"),
])
def test_one_memory_check_names_the_value_and_both_sizes(monkeypatch, check, args, message):
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**30)
    with pytest.raises(StatetrackError, match=re.escape(message + " of memory, more than the 1 GiB available")):
        check(*args)
    monkeypatch.setenv(limits.LIFT, "1")
    check(*args)


def test_a_construction_is_sized_by_its_tables(monkeypatch):
    from statetrack.tasks import make_task

    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**30)
    limits.check_construction(make_task("modadd", m=200), "full")  # 8 * 201 * 203 * 402 bytes: 0.12 GiB
    with pytest.raises(StatetrackError, match=r"construct: modadd\(m=500\) with 500 states and 503 symbols \(full\)"):
        limits.check_construction(make_task("modadd", m=500), "full")  # 1.9 GiB
    limits.check_construction(make_task("modadd", m=500), "rotation")  # no dense matrix per symbol


def test_a_fixed_training_set_is_sized(monkeypatch):
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 100 * 2**30)
    spec = load_spec("demo", "quick", overrides=["models=[lstm]", "train.dataset_size=100000000"])
    with pytest.raises(StatetrackError, match=re.escape("train.dataset_size 100000000 at train.max_length 40 (42 tokens) would take about 125 GiB")):
        expand(spec)
    expand(load_spec("demo", "quick", overrides=["models=[lstm]", "train.dataset_size=10000000"]))  # 12.5 GiB


@pytest.mark.parametrize("overrides, message", [
    (["train.val_samples=100000000"], r"validating on train\.val_samples 100000000 at train\.max_length 40 .* would take about"),
    (["eval.samples=100000000", "eval.batch_size=100000000"],
     r"evaluating eval\.samples 100000000 in batches of eval\.batch_size 100000000 at eval\.lengths up to \d+ .* would take about"),
])
def test_validation_and_evaluation_samples_are_sized_before_anything_is_allocated(monkeypatch, overrides, message):
    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**30)
    spec = load_spec("demo", "quick", overrides=overrides)
    with pytest.raises(StatetrackError, match=message + r" .* of memory, more than the 1 GiB available"):
        expand(spec)
    # many evaluation samples in small batches take time, not memory: only the arithmetic bound meets them
    expand(load_spec("demo", "quick", overrides=["eval.samples=100000"]))


def test_the_python_entry_points_size_their_batches_too(monkeypatch):
    from statetrack.models import zoo
    from statetrack.tasks import make_task
    from statetrack.training.evaluate import Sampling, evaluate_lengths
    from statetrack.training.train import TrainConfig, Trainer

    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**20)  # 1 MiB
    task = make_task("parity")
    model = zoo.build_model({"name": "lstm", "d_model": 8}, task.vocab_size, task.num_classes)
    with pytest.raises(StatetrackError, match=r"train\.val_samples: 1,000,000 sequences of 42 tokens would take about"):
        Trainer(model, task, TrainConfig(val_samples=10**6, max_length=40, device="cpu"), progress=False)
    with pytest.raises(StatetrackError, match=r"evaluating samples 10000000 in batches of batch_size: 100,000 sequences"):
        evaluate_lengths(model, task, [40], Sampling(samples=10**7, batch_size=10**5))
