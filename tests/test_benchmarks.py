"""The benchmarks run end to end and print the JSON that benchmarks/common.py describes (figures unchecked)."""

import json
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ops.py"


def test_ops_benchmark_json_has_every_implementation_and_key():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--T", "8", "32", "--repeat", "1", "--threads", "1",
         "--ops", "delta_rule", "delta_product_nh2", "diagonal_scan", "dense_transition"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    report = json.loads(out)
    rows = report["rows"]
    keys = {"op", "T", "impl", "ms", "speedup_vs_reference", "peak_mem_mb", "gflops"}
    assert all(keys <= set(r) for r in rows)
    impls = {(r["op"], r["impl"]) for r in rows}
    for op in ("delta_rule", "delta_product_nh2", "diagonal_scan", "dense_transition"):
        assert {(op, "reference"), (op, "fast")} <= impls
    assert ("diagonal_scan", "chunked") in impls and report["matmul_peak"]["impl"] == "torch.mm"
    assert report["machine"]["threads"] == 1 and report["machine"]["torch"] and report["machine"]["cores"] >= 1
    assert report["benchmark"] == "ops" and report["command"][:1] == ["--json"] and report["args"]["T"] == [8, 32]
    fla = {r["T"] for r in rows if r["impl"] == "fla_naive_chunk"}
    assert fla <= {32}  # fla's naive chunk form runs where T fills its chunks of 32, and only there
    fast = next(r for r in rows if r["op"] == "delta_rule" and r["impl"] == "fast")
    assert fast["ms"] > 0 and fast["speedup_vs_reference"] > 0 and fast["peak_mem_mb"] is not None


def test_bilinear_benchmark_json_has_every_structure_and_key():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bilinear.py"
    out = subprocess.run(
        [sys.executable, str(script), "--json", "--batch", "2", "--width", "8", "--T", "4", "--repeat", "1",
         "--threads", "1", "--lengths", "40", "--chunk", "16"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    rows = json.loads(out)["rows"]
    train = {r["structure"]: r for r in rows if r["measure"] == "train_fwd_bwd"}
    longs = {r["structure"]: r for r in rows if r["measure"] == "eval_long"}
    assert set(train) == set(longs) == {"full", "cp R=16", "block b=8", "rotation", "diagonal"}
    assert all({"fast_ms", "reference_ms", "speedup", "cpu_speedup"} <= set(r) for r in train.values())
    assert all(r["tokens"] == 40 and r["seconds"] > 0 and r["peak_rss_mb"] > 0 for r in longs.values())


def test_fixedpoint_benchmark_json_has_every_measurement():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "fixedpoint.py"
    out = subprocess.run(
        [sys.executable, str(script), "--json", "--batch", "2", "--width", "8", "--T", "4", "--repeat", "1",
         "--threads", "1", "--dense-batch", "2", "--dense-T", "8", "--reflections", "1", "2", "--fused-T", "3", "5"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    rows = json.loads(out)["rows"]
    price = [r for r in rows if r["measure"] == "iteration_price"]
    dense = [r for r in rows if r["measure"] == "against_dense"]
    assert sorted((r["reflections"], r["iterations"]) for r in price) == [(1, 1), (1, 4), (1, 16), (2, 1), (2, 4), (2, 16)]
    assert all(r["budget"] == r["iterations"] + 2 and r["layer_ms"] > 0 and r["scan_ms"] > 0 and r["projections_scans"] > 0
               and r["recurrence_ratio"] > 0
               for r in price)
    assert sorted(r["reflections"] for r in dense) == [1, 2]
    assert all(r["speedup"] > 0 and r["iterations_median"] >= 1 for r in dense)
    fused = [r for r in rows if r["measure"] == "fused_against_torch"]
    assert sorted((r["layer"], r["reflections"], r["mode"]) for r in fused) == sorted(
        (layer, r, mode) for layer in ("fixedpoint", "bedouin") for r in (1, 2) for mode in ("train", "eval"))
    assert all(r["fused_ms"] > 0 and r["torch_ms"] > 0 for r in fused)
    narrowing = [r for r in rows if r["measure"] == "narrowing"]
    assert sorted((r["source"].split()[0], r["mode"]) for r in narrowing) == [
        ("bedouin", "eval"), ("bedouin", "train"), ("fixedpoint", "eval"), ("fixedpoint", "train")]
    assert all(r["narrowing_ms"] > 0 and r["all_ms"] > 0 and 1 <= r["iterations_median"] <= r["iterations_max"] for r in narrowing)


def test_train_step_benchmark_json_has_every_model_shape_and_key():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "train_step.py"
    out = subprocess.run(
        [sys.executable, str(script), "--json", "--batch", "4", "--width", "8", "--lengths", "4", "--layers", "1", "2",
         "--repeat", "1", "--warmup", "1", "--steps", "1", "--models", "lstm", "deltanet", "--profile", "1"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    report = json.loads(out)
    rows = report["rows"]
    assert sorted((r["model"], r["layers"]) for r in rows) == [("deltanet", 1), ("deltanet", 2), ("lstm", 1), ("lstm", 2)]
    assert all(r["ms"] > 0 and r["gflop"] > 0 and r["arith_ms"] > 0 and r["x_lstm"] > 0 for r in rows)
    assert report["matmul_gflops"] > 0 and len(report["profiles"]) == 1
    assert all(0 <= op["share"] <= 1 for ops in report["profiles"].values() for op in ops)


def test_train_step_batch_scaling_cut_short_by_sigterm_reports_the_models_it_measured():
    """`timeout` (what a time-limited GPU session wraps it in) sends SIGTERM: the JSON still comes out,
    with every model measured at each k so far and `stopped` saying why the rest are missing."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "train_step.py"
    command = [sys.executable, str(script), "--batch-scaling", "1", "2", "--json", "--batch", "2", "--width", "8", "--lengths", "4",
               "--layers", "1", "--repeat", "2", "--warmup", "1", "--steps", "1", "--models", "lstm", "deltanet", "gru"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        for line in proc.stderr:
            if line.startswith("measured deltanet at 2x"):  # lstm and deltanet have their first figures at both k
                proc.send_signal(signal.SIGTERM)
                break
        out, _ = proc.communicate(timeout=300)
    report = json.loads(out)
    assert report["stopped"].startswith("stopped by SIGTERM")
    assert sorted({r["model"] for r in report["rows"]}) == ["deltanet", "lstm"]
    assert all(r["ms"] > 0 for r in report["rows"]) and all(r["gain"] == 1.0 for r in report["rows"] if r["k"] == 1)


def test_train_step_benchmark_times_the_three_adamw_forms():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "train_step.py"
    out = subprocess.run([sys.executable, str(script), "--optimizers", "--json", "--width", "8", "--layers", "2", "--warmup", "1",
                          "--steps", "2", "--models", "lstm", "bedouin"], capture_output=True, text=True, check=True, timeout=300).stdout
    rows = json.loads(out)["rows"]
    assert [r["model"] for r in rows] == ["lstm", "bedouin"]
    assert all(r["parameters"] > 0 and r["one at a time ms"] > 0 and r["foreach ms"] > 0 and r["fused ms"] > 0 for r in rows)
    assert all(r["foreach equal"] for r in rows)  # what the trainer relies on: foreach is the same arithmetic


def test_suite_flops_benchmark_counts_each_experiments_arithmetic():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "suite_flops.py"
    out = subprocess.run([sys.executable, str(script), "demo", "--json", "--rate", "50"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    report = json.loads(out)
    (row,) = report["rows"]
    assert row["experiment"] == "demo" and row["runs"] == 9 and report["matmul_gflops"] == 50
    assert row["train_gflop"] > row["eval_gflop"] > 0
    assert row["arith_s"] == pytest.approx((row["train_gflop"] + row["eval_gflop"]) / 50 / 2)
    assert row["wall_s"] > row["arith_s"]  # the snapshot's wall time, from the package's snapshots


def test_paper_hours_times_each_setting_once_and_adds_up_the_runs():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_hours.py"
    out = subprocess.run([sys.executable, str(script), "pfsa-belief", "demo", "--json", "--steps", "1", "--warmup", "1",
                          "--device", "cpu"], capture_output=True, text=True, check=True, timeout=300).stdout
    rows = json.loads(out)["rows"]
    assert [r["experiment"] for r in rows] == ["pfsa-belief", "demo"]  # the cheaper first
    demo = rows[1]
    assert demo["runs"] == 9 and demo["untimed_runs"] == 0 and len(demo["settings"]) == 3  # 3 models x 3 seeds
    per_run = {s["model"]: s["step_ms"] / 1e3 for s in demo["settings"]}
    assert demo["hours"] == pytest.approx(sum(per_run.values()) * 3 * demo["steps"] / 9 / 3600)  # 20000 steps each
    out = subprocess.run([sys.executable, str(script), "demo", "--json", "--budget", "1e-9", "--device", "cpu"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    (row,) = json.loads(out)["rows"]
    assert row["hours"] is None and row["untimed_runs"] == 9 and row["settings"] == []  # out of time before the first


def test_paper_hours_skips_a_setting_whose_step_the_memory_estimate_puts_above_the_memory():
    """A step estimated above --memory is not trained (it would be killed, and the timing with it):
    its setting names the estimate, and its runs count as untimed."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "paper_hours.py"
    out = subprocess.run([sys.executable, str(script), "demo", "--json", "--memory", "0.001", "--device", "cpu"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    (row,) = json.loads(out)["rows"]
    assert row["hours"] is None and row["untimed_runs"] == 9 and len(row["settings"]) == 3
    for setting in row["settings"]:
        assert "step_ms" not in setting and setting["step_gib"] > 0.001
        assert setting["skipped"].startswith("estimated ") and setting["skipped"].endswith("more than 0.001 GiB")


def test_pack_slice_keeps_the_store_and_the_paused_runs_checkpoints_within_its_limit(tmp_path):
    """A store with a done and a paused run: the archive holds the store (still a statetrack store),
    the paused run's checkpoint and the table's measured snapshot, not the done run's checkpoint nor
    the reports; over the limit, nothing."""
    import sqlite3

    from statetrack.store import Store

    results = tmp_path / "paper"
    Store(results / "statetrack.db")
    with sqlite3.connect(results / "statetrack.db") as db:
        for run_id, status in (("done0", "done"), ("paused0", "running")):
            db.execute("INSERT INTO runs (id, experiment, model, task, seed, lr, config, status) "
                       "VALUES (?, 'exp', 'lstm', 'parity', 0, 0.001, '{}', ?)", (run_id, status))
    checkpoints = results / "exp" / "checkpoints"
    checkpoints.mkdir(parents=True)
    for run_id in ("done0", "paused0"):
        (checkpoints / f"{run_id}.pt").write_bytes(b"x" * 1000)
    (results / "exp" / "report.md").write_text("report")
    (results / "table").mkdir()
    (results / "table" / "state-table.quick.json").write_text("{}")  # its parts: the sessions' wall time
    (results / "table" / "state-table.md").write_text("the user's table")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "pack_slice.py"
    archive = tmp_path / "slice.tar.gz"
    subprocess.run([sys.executable, str(script), str(results), str(archive)], check=True, capture_output=True)
    back = tmp_path / "back"
    subprocess.run([sys.executable, str(script), "--unpack", str(archive), str(back)], check=True, capture_output=True)
    files = {str(p.relative_to(back)) for p in back.rglob("*") if p.is_file()}
    assert files == {"statetrack.db", "exp/checkpoints/paused0.pt", "table/state-table.quick.json"}
    assert Store(back / "statetrack.db", read_only=True).status("done0") == "done"
    refused = subprocess.run([sys.executable, str(script), str(results), str(archive), "--limit-mib", "0.0001"],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "over the limit" in refused.stderr and not archive.exists()
    # a checkpoint too large for the limit: the paused run starts again next session
    out = subprocess.run([sys.executable, str(script), str(results), str(archive), "--without-checkpoints"],
                         check=True, capture_output=True, text=True).stdout
    assert "left out the paused run paused0's checkpoint" in out
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["statetrack.db", "table/state-table.quick.json"]
