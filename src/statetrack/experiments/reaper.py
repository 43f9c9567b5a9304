"""Ray's processes end with the driver that started them.

A driver that starts a local Ray instance (`--backend ray` without `--address`) is the ancestor of
Ray's processes (GCS, raylet, its agents, the workers). Ray stops them at `ray.shutdown()`, and
most of them follow a killed driver by themselves, but the raylet's agents (DashboardAgent,
RuntimeEnvAgent) try to report the raylet's death to the GCS that died with it and stay behind. The
reaper, started by such a driver in a session of its own, follows the driver's Ray processes while
the driver lives and kills those still running once it is gone (kill -9 included): a process is
known by its pid and start time, so a reused pid is never hit. Linux only (it reads /proc).

    python reaper.py DRIVER_PID DRIVER_START   (run by its path: it imports nothing of the package, nor torch)
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_SECONDS = 0.5


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19]) if fields[0] not in (b"Z", b"X") else None
    except (OSError, IndexError, ValueError):
        return None


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _is_ray(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read()
    except OSError:
        return False
    return command.startswith(b"ray::") or b"/ray/" in command


def ray_descendants(root: int) -> dict[int, int]:
    """pid -> start time of the Ray processes among `root`'s descendants."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = _parent(int(name))
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        start = start_time(pid)
        if start is not None and pid != os.getpid() and _is_ray(pid):
            found[pid] = start
    return found


def reap(driver: int, driver_start: int, poll: float = POLL_SECONDS) -> int:
    """Follow the driver's Ray processes until the driver is gone, then kill those still running;
    returns how many were killed."""
    known: dict[int, int] = {}
    while start_time(driver) == driver_start:
        known.update(ray_descendants(driver))
        time.sleep(poll)
    killed = 0
    for pid, start in known.items():
        if start_time(pid) == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


_STARTED: set[int] = set()  # drivers (this process) that have a reaper


def start_reaper() -> None:
    """Start the reaper of this process's Ray processes (once per process; Linux only)."""
    import subprocess

    me = os.getpid()
    if not sys.platform.startswith("linux") or me in _STARTED:
        return
    subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(me), str(start_time(me))],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _STARTED.add(me)


if __name__ == "__main__":
    reap(int(sys.argv[1]), int(sys.argv[2]))
