"""Size bounds (statetrack.limits) and Ray's address check: every shipped spec passes at both scales on
a 24 GiB machine, a setting beyond the estimate is refused until STATETRACK_NO_SIZE_LIMIT lifts it, and
only a gRPC server counts as a reachable Ray cluster."""

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
    with pytest.raises(StatetrackError, match="needs an estimated .* of memory, more than the 0.000977 GiB available"):
        expand(spec)


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
