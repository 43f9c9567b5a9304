"""Where the runs of a sweep execute: in this process, on a local process pool, or on a Ray cluster.

Every backend runs `worker.train_and_evaluate` and hands its outcome (a small dict of evaluations,
curve and timings, or the error) back to the driver, and only the driver writes the SQLite store.
So the store lives on the driver's disk, one process writes it, and a Ray cluster needs no shared
filesystem. Checkpoints are the exception: a worker writes them under the results folder when it
can (shared filesystem or same machine: an interrupted run resumes from its last checkpoint),
otherwise under its own temporary folder. Workers import the user's modules (`imports`) first, and
end with their driver, however it ends (`worker.die_with`).

A backend has `slots` (how many runs the driver keeps in flight), `submit(run) -> handle`,
`wait(handles) -> finished handles`, `outcome(handle) -> dict`, `describe()`, `close(cancel)`, and
`in_process` (runs show their own progress bars here). `make_backend` is the one place that checks
the backend options and picks one.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import queue
import socket
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from statetrack.errors import StatetrackError
from statetrack.experiments.reaper import start_reaper
from statetrack.experiments.spec import RunSpec
from statetrack.experiments.worker import driver_identity, failed_outcome, prepare_worker, train_and_evaluate
from statetrack.training.train import resolve_device

if TYPE_CHECKING:
    from statetrack.options import RunOptions

BACKENDS = ("local", "ray")

MAX_LEASE = 7 * 24 * 3600.0  # seconds a driver may go without renewing its claims (finite: the heartbeat sleeps on it)
MAX_GPUS_PER_RUN = 1024  # GPUs of one Ray task: a fraction shares one GPU among tasks


def available_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _cpu_ticks(cpus) -> tuple[int, int]:
    """(busy, total) clock ticks of the CPUs `cpus` since boot, from /proc/stat (Linux)."""
    busy = total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def _own_ticks() -> int:
    """The CPU time (user + system, clock ticks) this process has used, all its threads together."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def free_cores(window: float = 0.1) -> float:
    """How many of this process's cores other processes leave idle: measured over `window` seconds
    from /proc/stat, less this process's own use (Linux); elsewhere the cores less the 1-minute load
    average."""
    cores = available_cores()
    try:
        cpus = os.sched_getaffinity(0)
        (busy, total), mine = _cpu_ticks(cpus), _own_ticks()
        time.sleep(window)
        (busy_after, total_after), mine_after = _cpu_ticks(cpus), _own_ticks()
    except (OSError, AttributeError, ValueError, IndexError):
        try:
            return max(0.0, cores - os.getloadavg()[0])
        except OSError:
            return float(cores)
    if total_after <= total:
        return float(cores)
    others = max(0, (busy_after - busy) - (mine_after - mine))
    return max(0.0, cores * (1 - others / (total_after - total)))


def default_workers(device: str = "auto") -> int:
    """One worker per CPU core on CPU (small models run best single-threaded side by side); one on CUDA."""
    if resolve_device(device).type == "cuda":
        return 1
    return available_cores()


class InProcessBackend:
    """One run at a time in this process, with the trainer's own progress bars (`--workers 1`)."""

    name = "local"
    slots = 1
    in_process = True

    deadline: float | None = None  # when training stops (`RunOptions.deadline`, set by `make_backend`)

    def __init__(self, results_dir: Path, device: str, progress: bool = True, log_to: dict | None = None):
        prepare_worker(None)  # the driver already imported the user's modules
        self.results_dir, self.device, self.progress, self.log_to = results_dir, device, progress, log_to
        self.threads = torch.get_num_threads()  # the most it takes (OMP_NUM_THREADS, else one per core)
        self.handles = itertools.count()
        self.runs: dict[int, RunSpec] = {}
        self.outcomes: dict[int, dict] = {}

    def describe(self) -> str:
        return "one run at a time in this process"

    def share_cores(self, shared: bool) -> None:
        """Torch threads for the next run: one while other drivers train on this machine, else the
        cores other processes leave free (`free_cores`, at least one), as a pool worker takes its
        share of the cores. Threads beyond the free cores wait on each other's hand-offs, which costs a
        small model far more than the second thread gains it."""
        torch.set_num_threads(1 if shared else max(1, min(self.threads, round(free_cores()))))

    def submit(self, run: RunSpec) -> int:
        handle = next(self.handles)
        self.runs[handle] = run
        return handle

    def wait(self, handles: list, timeout: float | None = None) -> list:
        handle = handles[0]  # trains it now, whatever the timeout
        self.outcomes[handle] = train_and_evaluate(
            self.runs.pop(handle), self.results_dir, self.device, self.progress, self.log_to, deadline=self.deadline
        )
        return [handle]

    def outcome(self, handle) -> dict:
        return self.outcomes.pop(handle)

    def close(self, cancel: bool = False) -> None:
        pass


_PROGRESS = None  # in a pool worker: the queue its runs report their steps to (`LocalBackend.reports`)


def _prepare_pool_worker(threads: int, imports: list[str], driver: tuple, progress) -> None:
    global _PROGRESS
    prepare_worker(threads, imports, driver)
    progress.cancel_join_thread()  # a worker never waits on unread reports to exit
    _PROGRESS = progress


def _run_in_worker(
    run: RunSpec, results_dir: str, device: str, log_to: dict | None = None, deadline: float | None = None
) -> dict:
    return train_and_evaluate(
        run, results_dir, device, progress=False, log_to=log_to, progress_queue=_PROGRESS, deadline=deadline
    )


class LocalBackend:
    """A process pool on this machine (spawned, not forked: the driver may hold torch threads)."""

    name = "local"
    in_process = False
    deadline: float | None = None  # when training stops (`RunOptions.deadline`, set by `make_backend`)

    def __init__(
        self, workers: int, results_dir: Path, device: str, imports: Sequence[str] = (), log_to: dict | None = None
    ):
        self.slots = workers
        self.threads = max(1, available_cores() // workers)
        self.results_dir, self.device, self.log_to = str(results_dir), device, log_to
        context = multiprocessing.get_context("spawn")
        self.queue = context.Queue()  # (run id, step, total) from the workers' runs, at each curve point
        self.pool = ProcessPoolExecutor(
            workers,
            mp_context=context,
            initializer=_prepare_pool_worker,
            initargs=(self.threads, list(imports), driver_identity(), self.queue),
        )

    def describe(self) -> str:
        return f"local pool, {self.slots} workers x {self.threads} threads"

    def submit(self, run: RunSpec):
        return self.pool.submit(_run_in_worker, run, self.results_dir, self.device, self.log_to, self.deadline)

    def reports(self) -> dict[str, tuple[int, int]]:
        """run id -> (step, total steps) of the latest reports since the last call."""
        latest = {}
        try:
            while True:
                run_id, step, total = self.queue.get_nowait()
                latest[run_id] = (step, total)
        except (queue.Empty, OSError, ValueError):
            pass
        return latest

    def wait(self, handles: list, timeout: float | None = None) -> list:
        """The finished handles: at least one, or none when `timeout` seconds pass first."""
        return list(wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)[0])

    def outcome(self, handle) -> dict:
        try:
            return handle.result()
        except Exception as error:  # a worker killed under it (out of memory, say), or its imports failed
            return failed_outcome(f"{type(error).__name__}: {error} (in a worker process)")

    def close(self, cancel: bool = False) -> None:
        """Wait for the workers to finish; with `cancel`, stop them now (their runs restart from
        their checkpoints on a later call). The pool has no public way to stop a running task, so
        its worker processes are terminated."""
        if cancel:
            for process in list((getattr(self.pool, "_processes", None) or {}).values()):
                process.terminate()
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
        self.queue.close()
        self.queue.cancel_join_thread()


def _checkpoint_root(results_dir: str) -> str:
    """The results folder when this node can write it, else a node-local temporary folder."""
    import tempfile

    try:
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        probe = Path(results_dir) / f".probe-{socket.gethostname()}-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return results_dir
    except OSError:
        return str(Path(tempfile.gettempdir()) / "statetrack-results")


def _ray_task(
    run: RunSpec,
    results_dir: str,
    device: str,
    threads: int,
    imports: list[str],
    driver: tuple,
    log_to: dict | None = None,
    deadline: float | None = None,
) -> dict:
    prepare_worker(threads, imports, driver)  # a Ray worker process may serve many runs: imports are loaded once
    outcome = _run_in_worker(run, _checkpoint_root(results_dir), device, log_to, deadline)
    return {**outcome, "host": f"{outcome.get('host') or socket.gethostname()} ({node_address()})"}


def node_address() -> str:
    """The Ray node this process runs on, by its IP address (hosts in a cluster can share a name)."""
    import ray

    try:
        return ray.util.get_node_ip_address()
    except Exception:  # not on a Ray node after all
        return "not a Ray node"


class RayBackend:
    """One Ray task per run. `address`: join that cluster ('auto' finds one started on this machine
    with `ray start`); None starts a local Ray instance with `num_cpus` CPUs. A Ray instance that is
    already initialised in this process is used as it is (and left running)."""

    name = "ray"
    in_process = False
    deadline: float | None = None  # when training stops (`RunOptions.deadline`, set by `make_backend`)

    def __init__(
        self,
        address: str | None,
        num_cpus: int | None,
        results_dir: Path,
        device: str,
        cpus_per_run: float = 1,
        gpus_per_run: float | None = None,
        imports: Sequence[str] = (),
        log_to: dict | None = None,
    ):
        try:
            import ray
        except ImportError:
            raise StatetrackError("the ray backend needs Ray: pip install 'statetrack[ray]'") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    start_reaper()  # Ray's processes end with this driver, kill -9 included
                    ray.init(num_cpus=num_cpus or available_cores(), include_dashboard=False, log_to_driver=False)
            except ConnectionError as error:
                raise StatetrackError(
                    f"cannot join the Ray cluster at {address!r}: {error}; if the cluster uses token authentication,"
                    " set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (see `ray get-auth-token` on the head node) here too"
                ) from None
        resources = ray.cluster_resources()
        cluster_gpus = resources.get("GPU", 0)
        if gpus_per_run is None:
            gpus_per_run = 1 if cluster_gpus and device != "cpu" else 0
        problem = (
            f"--gpus-per-run {gpus_per_run:g}, but the Ray cluster has no GPUs"
            if gpus_per_run and not cluster_gpus
            else "--device cuda, but the Ray cluster has no GPUs (or --gpus-per-run is 0)"
            if device == "cuda" and not gpus_per_run
            else None
        )
        if problem:
            self.close()
            raise StatetrackError(problem)
        self.cpus_per_run, self.gpus_per_run = cpus_per_run, gpus_per_run
        self.cluster_cpus, self.cluster_gpus = resources.get("CPU", 0), cluster_gpus
        # A worker with a GPU gets CUDA_VISIBLE_DEVICES from Ray, so device 'auto' finds exactly its GPU;
        # without one, Ray hides the GPUs and 'auto' means CPU.
        self.task = ray.remote(_ray_task).options(num_cpus=cpus_per_run, num_gpus=gpus_per_run, max_retries=2)
        self.results_dir, self.device = str(Path(results_dir).resolve()), device
        self.threads = max(1, int(cpus_per_run))
        self.imports, self.log_to = list(imports), log_to
        self.slots = float("inf")  # every run goes to Ray's scheduler at once (an autoscaler sees the demand)

    def describe(self) -> str:
        return (
            f"ray, cluster of {self.cluster_cpus:g} CPUs and {self.cluster_gpus:g} GPUs, "
            f"{self.cpus_per_run:g} CPU and {self.gpus_per_run:g} GPU per run"
        )

    def submit(self, run: RunSpec):
        return self.task.remote(
            run,
            self.results_dir,
            self.device,
            self.threads,
            self.imports,
            driver_identity(),
            self.log_to,
            self.deadline,
        )

    def wait(self, handles: list, timeout: float | None = None) -> list:
        return self.ray.wait(handles, num_returns=1, timeout=timeout)[0]

    def outcome(self, handle) -> dict:
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayError as error:  # the worker or its node died, after Ray's retries
            return failed_outcome(f"{type(error).__name__}: {str(error).strip().splitlines()[0]}")

    def close(self, cancel: bool = False) -> None:
        if self.started:
            self.ray.shutdown()


def _check_cuda(device: str, what: str, instead: str) -> None:
    """A CUDA `device` must be present on this machine; `what` names where it was asked for,
    `instead` how to ask for another."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0 or (resolved.index or 0) >= count:
            raise StatetrackError(
                f"{what} {device}: this machine has {count} CUDA device(s) "
                f"(use {instead} cpu, or auto to take CUDA when present)"
            )


def experiment_device(experiment: str, runs: list[RunSpec], device: str, backend: str = "local") -> str:
    """The device an experiment trains on: its spec's `train.device` where it sets one (not 'auto';
    one for all its runs), else `device` (--device). Part of the runs' ids, so it is used, never
    overridden: a --device other than auto that contradicts it, or a CUDA device this machine lacks
    (local backend), is a one-line error."""
    wanted = {run.train.get("device", "auto") for run in runs} - {"auto"}
    if not wanted:
        return device
    if len(wanted) > 1:
        raise StatetrackError(
            f"experiment {experiment!r}: its runs set different train.device values "
            f"({', '.join(sorted(map(str, wanted)))}); an experiment trains on one device"
        )
    (spec_device,) = wanted
    if device not in ("auto", spec_device):
        raise StatetrackError(
            f"experiment {experiment!r} sets train.device {spec_device}, but --device is {device}; "
            f"drop one of them (train.device is part of every run's id)"
        )
    if backend == "local":
        _check_cuda(spec_device, f"experiment {experiment!r}: train.device", "train.device")
    return spec_device


RAY_PORTS = {"ray://": 10001, "": 6379}  # Ray's default ports: the client server, the head node's GCS


# An HTTP/2 client preface and an empty SETTINGS frame: any gRPC server (Ray's head node, its client
# server) answers with a SETTINGS frame of its own (RFC 9113, section 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A one-line error unless the Ray cluster at `address` (host:port, a bare host, or ray://host:port)
    answers within `timeout` seconds, where Ray itself would wait without end: a TCP connection, then
    (without TLS, RAY_USE_TLS unset) a gRPC server's HTTP/2 greeting, so a port held by something else
    (a proxy that accepts every connection) is refused too."""
    scheme = "ray://" if address.startswith("ray://") else ""
    rest = address[len(scheme) :]
    host, colon, port = rest.rpartition(":")
    if not colon:
        host, port = rest, str(RAY_PORTS[scheme])
    host = host.strip("[]")  # an IPv6 address in brackets
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StatetrackError(f"--address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    problem = None
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            if os.environ.get("RAY_USE_TLS", "0") in ("", "0"):
                connection.sendall(HTTP2_PREFACE)
                answer = connection.recv(9)
                if len(answer) < 9 or answer[3] != 0x4:
                    problem = "something answers there, but not a Ray (gRPC) server"
    except OSError as error:
        problem = (
            f"no answer within {timeout:g} s"
            if isinstance(error, TimeoutError)
            else (error.strerror or type(error).__name__).lower()
        )
    if problem:
        raise StatetrackError(
            f"cannot reach the Ray cluster at --address {address}: {problem} "
            "(is its head node running, and is the port open to this machine?)"
        )


def check_backend(
    name: str,
    workers: int | None = None,
    address: str | None = None,
    device: str | None = None,
    gpus_per_run: float | None = None,
    lease: float | None = None,
) -> None:
    """One-line errors for impossible backend options, before anything runs. A CUDA device must be
    present here for the local backend (a Ray cluster's GPUs are checked when it is joined)."""
    if name not in BACKENDS:
        raise StatetrackError(f"unknown backend {name!r}; expected one of: {', '.join(BACKENDS)}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise StatetrackError(f"--workers must be an integer >= 1, got {workers!r}")
    if address and name != "ray":
        raise StatetrackError("--address joins a Ray cluster; use it with --backend ray")
    if address and address != "auto":  # 'auto' is found by Ray itself, from this machine's running instance
        check_reachable(address)
    if lease is not None and not 0 < lease <= MAX_LEASE:
        raise StatetrackError(
            f"--lease must be a number of seconds > 0 and at most {MAX_LEASE:g} (a week), got {lease:g}"
        )
    if gpus_per_run is not None:
        if name != "ray":
            raise StatetrackError("--gpus-per-run sets the GPUs of each Ray task; use it with --backend ray")
        if not 0 <= gpus_per_run <= MAX_GPUS_PER_RUN:  # nan fails both comparisons
            raise StatetrackError(f"--gpus-per-run must be a number from 0 to {MAX_GPUS_PER_RUN}, got {gpus_per_run:g}")
    if device is not None:
        resolve_device(device)
        if name == "local":
            _check_cuda(device, "--device", "--device")


def make_backend(
    options: RunOptions,
    results_dir: Path,
    device: str,
    imports: Sequence[str] = (),
    runs: int | None = None,
    log_to: dict | None = None,
):
    """The backend for `runs` runs under `options` (`runner.RunOptions`: its backend, workers,
    address, GPUs per run and progress). local: `workers` at a time (default one per core; one on
    CUDA) on a process pool, or in this process when that is one; ray: one Ray task per run on the
    cluster at `address`, or on a local Ray instance with `workers` CPUs. `log_to`: the loggers each
    run writes to while it trains (statetrack.training.loggers.run_loggers); its runs stop at
    `options.deadline`. The options are checked by the caller (`runner.RunOptions.check`), once."""
    backend = _backend(options, results_dir, device, imports, runs, log_to)
    backend.deadline = options.deadline
    return backend


def _backend(options: RunOptions, results_dir: Path, device: str, imports: Sequence[str], runs, log_to):
    workers = options.workers
    if options.backend == "ray":
        return RayBackend(
            options.address,
            workers,
            results_dir,
            device,
            gpus_per_run=options.gpus_per_run,
            imports=imports,
            log_to=log_to,
        )
    workers = workers or default_workers(device)
    if runs:  # no more workers than runs
        workers = min(workers, runs)
    if workers == 1:
        return InProcessBackend(results_dir, device, options.progress, log_to)
    return LocalBackend(workers, results_dir, device, imports, log_to)
