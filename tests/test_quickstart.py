"""The README's Python quickstart runs as written and prints what the README says it prints."""

import os
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart() -> tuple[str, str]:
    """(the code, the printed text) of the README's "Quickstart: Python": its first python block and
    the text block after it."""
    section = README.read_text().split("## Quickstart: Python\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = section.split("```text\n", 1)[1].split("```", 1)[0]
    return code, printed


def test_the_readme_quickstart_prints_what_the_readme_says(tmp_path):
    code, printed = quickstart()
    assert "torch.manual_seed(" in code and "1000" in printed
    # one torch thread: fast beside other jobs (its figures are the README's at two threads as well)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == printed


def test_the_readme_experiment_from_python_runs_scores_and_reports(tmp_path):
    """The README's "a whole experiment from Python" block: resolve, run, score once, render."""
    section = README.read_text().split("A whole experiment from Python", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    headline, verdicts = result.stdout.strip().splitlines()[-1].split("} ")
    assert headline.startswith("{40: ") and set(verdicts.strip("[]").replace("'", "").split(", ")) <= {"✓", "✗", "inconclusive", "not in this run"}
    assert (tmp_path / "results" / "demo_seeds-0_train.steps-200_models-name-deltanet-eig_range--1-1-num_heads-1" / "report.md").is_file()
