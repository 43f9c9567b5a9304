"""The reproduction book: every shipped experiment's claims with their verdicts, generated from
committed snapshots of measured results, so that the book can never drift from the figures.

`statetrack reproduce` runs experiments into one store (`run_experiment`, resumable), then
`write_snapshot` exports each experiment's planned rows (the resolved spec and plan, every run's
status, the exported result rows, the git revision, the machine, the torch version and the wall
time of every part of the work) to its snapshot, `<experiment>.<scale>.json` in the package's
snapshot folder (`paths.snapshot_folder`, beside the state table's), and the book is
generated from the snapshots (`book_files`; `statetrack docs --write` writes it with every other
generated doc):
- `<book dir>/experiments/<experiment>.md`, a page per experiment: what the paper claims (the
  spec's description), per scale the command, the settings read from the spec, the paper's figures
  beside the measured ones with the metric named and the spread over seeds, every claim with its
  verdict and how many seeds pass, the fit and the per-length table, the wall time and the machine;
  then the notes' summary and the probes behind it;
- `<book dir>/claims.md`: how a verdict is read (`RULES`, stated once: every page links to it),
  then one table of every claim of every experiment, a ✗ or inconclusive one ending with its reason;
- the README's blocks `demo` and `experiments` (the index of the pages).
The claims, notes and selection rules come from the specs as they are now (`spec.spec_now`),
the figures only from the snapshots: editing a claim re-scores it without re-running anything.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import re
import time
from pathlib import Path

from statetrack.errors import StatetrackError
from statetrack.experiments.headlines import headlines, paper_scaled
from statetrack.experiments.spec import paper_of, shipped_specs, spec_now, spec_tasks, train_config, train_lengths_text
from statetrack.generated import fill_blocks, sync
from statetrack.paths import SNAPSHOTS, snapshot_file, write_text_atomically
from statetrack.results.claims import (
    FAIL,
    INCONCLUSIVE,
    KIND_TEXT,
    NOT_MEASURED,
    VERDICTS,
    check_verdict,
    paper_figures,
)
from statetrack.results.report import (
    MEASURED_KEY,
    claim_measured,
    claim_test,
    figure_text,
    paper_tables,
    protocol_cell,
    verdict_line,
)
from statetrack.results.scoring import Scored, fit_table, score
from statetrack.results.selection import SummaryEntry, final_loss, learning_runs
from statetrack.results.tables import fit_rows, markdown_table, table_rows
from statetrack.schema import SCALES
from statetrack.store import REVISIONS_JOINED, Plan

BOOK_DIR = Path("docs")
SNAPSHOT_VERSION = 1


# ---- snapshots -----------------------------------------------------------------------------------
def cpu_name() -> str | None:
    """The CPU's model name (/proc/cpuinfo), else what `platform.processor()` gives; None if neither says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict:
    """What the figures were measured on: cores, memory, the CPU and the vector kernels torch picked
    for it (`cpu_capability`: AVX2, AVX512, ...; figures repeat bit for bit only at the same one),
    the GPU, torch and Python."""
    import torch

    memory = None
    try:
        with open("/proc/meminfo") as f:
            memory = round(int(f.readline().split()[1]) / 2**20)  # GiB
    except (OSError, ValueError, IndexError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "cpu": cpu_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": gpu,
        "system": platform.system(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def describe_machine(info: dict) -> str:
    cpu = f"{info['cores']} CPU cores" + (f" ({info['cpu_capability']})" if info.get("cpu_capability") else "")
    cpu += f", {info['memory_gib']} GiB" if info.get("memory_gib") else ""
    return (f"{info['gpu']}, " if info.get("gpu") else "") + f"{cpu}, torch {info['torch']}, Python {info['python']}"


def runs_revision(runs: list[dict]) -> str:
    """The revisions `runs` were trained at, the most runs' first ("b213846 and 173eddd"), or '' for
    none: a snapshot names what measured it, not the code that exported it (a resumed measurement
    spans revisions, and so does a run resumed from a checkpoint written at another, whose git_rev
    names each: `Outcome.revisions`; a snapshot written again from a store names its runs' revision
    still)."""
    counts = collections.Counter(
        rev for r in runs if r.get("git_rev") for rev in dict.fromkeys(r["git_rev"].split(REVISIONS_JOINED))
    )
    return REVISIONS_JOINED.join(rev for rev, _ in counts.most_common())


def write_snapshot(store, experiment: str, part: dict | None = None, path: Path | None = None) -> Path:
    """Export the experiment's latest plan and its finished rows to its snapshot file; `part`
    ({seconds, runs, workers}: the wall time of one `reproduce` of it that trained `runs` runs) is
    added to the parts of the snapshot it replaces when every run of that one's plan is in this plan
    (a resumed suite adds up its parts, and so does a plan that adds runs to it), and starts the
    list afresh otherwise (the earlier time went partly into runs this plan no longer has) or when
    the parts would add up to more runs than the plan holds (the runs were measured again). `path`:
    the snapshot's file (default: the experiment's in the package's snapshot folder)."""
    from statetrack.experiments.runner import git_revision

    plan = store.plan(experiment)
    if plan is None:
        raise StatetrackError(f"experiment {experiment!r} has no plan in the store: run it first")
    scale = plan.scale or "quick"
    path = snapshot_file(experiment, scale) if path is None else path
    ids = plan.ids
    parts = []
    if path.exists():
        before = json.loads(path.read_text())
        if {r["id"] for r in before.get("plan", [])} <= set(ids):
            parts = before.get("parts", [])
    if part and (part.get("runs") or part.get("paused")):
        parts.append({**part, "finished": time.strftime("%Y-%m-%d"), "machine": machine()})
    # parts whose runs, with the later parts', come to more than the plan holds belong to an earlier
    # measurement that a later one trained again (e.g. the suite run afresh into a new store)
    kept: list[dict] = []  # the parts of the latest measurement
    trained = 0
    for earlier in reversed(parts):
        trained += earlier["runs"]
        if trained > len(ids) and kept:
            break
        kept.insert(0, earlier)
    parts = kept
    stored = [r for r in store.runs(experiment) if r["id"] in ids]
    learning = learning_runs(stored, plan, store.curves)
    runs = [
        {
            k: r[k]
            for k in (
                "id",
                "model",
                "task",
                "lr",
                "seed",
                "status",
                "steps",
                "train_seconds",
                "eval_seconds",
                "num_parameters",
                "git_rev",
            )
        }
        | {
            "diverged_at": r.get("diverged_at"),
            "error": (r["error"] or "").splitlines()[0] if r["error"] else None,
            "still_learning": r["id"] in learning,
            "final_loss": final_loss(store.curves(r["id"])) if r["status"] == "done" else None,
        }
        for r in stored
    ]
    snapshot = {
        "version": SNAPSHOT_VERSION,
        "experiment": experiment,
        "scale": scale,
        "git_rev": runs_revision(runs) or git_revision(),
        "spec": plan.spec,
        "plan": plan.runs,
        "runs": runs,
        "results": store.results(experiment, ids),
        "parts": parts,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(snapshot, indent=1, sort_keys=True) + "\n")  # whole or not at all
    return path


def record_part(
    store, experiment: str, started_at: float, workers: int | None, path: Path | None = None
) -> Path | None:
    """Write the experiment's snapshot with one more part: the wall time since `started_at` (one
    `statetrack reproduce` of it, finished or interrupted) and the runs of its plan that finished
    since then, and those started (or resumed) since then and paused unfinished (`paused`, where
    any: a slice whose run goes on next session counts its time too). None when the experiment has
    no plan yet (it stopped before recording one)."""
    plan = store.plan(experiment)
    if plan is None:
        return None
    ids = plan.ids
    runs = [r for r in store.runs(experiment) if r["id"] in ids]
    trained = sum(1 for r in runs if (r["finished_at"] or 0) >= started_at)
    paused = sum(
        1 for r in runs if r["status"] != "done" and not r["finished_at"] and (r["started_at"] or 0) >= started_at
    )
    part = {"seconds": round(time.time() - started_at, 1), "runs": trained, "workers": workers}
    return write_snapshot(store, experiment, part | ({"paused": paused} if paused else {}), path=path)


def read_snapshots(folder: str | Path | None = None) -> dict:
    """{(experiment, scale): snapshot} of every shipped experiment's snapshot in `folder` (default:
    the package's snapshot folder, `paths.snapshot_folder`)."""
    out = {}
    for name in shipped_specs():
        for scale in SCALES:
            path = snapshot_file(name, scale) if folder is None else Path(folder) / snapshot_file(name, scale).name
            if not path.exists():
                continue
            try:
                snapshot = json.loads(path.read_text())
                out[(snapshot["experiment"], snapshot["scale"])] = snapshot
            except (ValueError, KeyError, TypeError) as error:
                raise StatetrackError(f"{path}: not a statetrack snapshot ({error})") from None
    return out


# ---- what a snapshot says ------------------------------------------------------------------------
def scored(snapshot: dict) -> Scored:
    """A snapshot scored as a store is (`scoring.score`), under the spec's `selection` and `paper` as
    they are now (else the snapshot's)."""
    experiment, scale = snapshot["experiment"], snapshot["scale"]
    plan = Plan(experiment, {**snapshot["spec"], "scale": scale}, snapshot["plan"])
    now = spec_now(experiment, scale) or {}
    return score(
        experiment, plan, snapshot["runs"], snapshot["results"], paper=now.get("paper"), selection=now.get("selection")
    )


def _paper_now(name: str, scale: str) -> dict | None:
    """The `paper` of the experiment's spec as it is now at `scale`."""
    return (spec_now(name, scale) or {}).get("paper")


def wall_seconds(snapshot: dict) -> float:
    return sum(p["seconds"] for p in snapshot.get("parts", []))


def duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return (
        f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60:02d} s" if rest >= 60 else f"{rest} s"
    )


def _join(values) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def settings_line(spec: dict) -> str:
    """The settings a reader needs, read from the spec as run: tasks, training lengths, steps, batch,
    width, layers, lrs, seeds, evaluation lengths and samples."""
    from statetrack.labels import task_label

    train, evaluate, defaults = spec.get("train") or {}, spec.get("eval") or {}, spec.get("model_defaults") or {}
    tasks = spec_tasks(spec)
    names = [
        task_label({k: v for k, v in ({"name": t} if isinstance(t, str) else t).items() if k not in ("train", "eval")})
        for t in tasks
    ]
    steps = train.get("steps", "-")
    keys = ("min_length", "max_length", "length_step", "curriculum", "steps")
    lengths_only = {k: train[k] for k in keys if k in train}
    if train.get("curriculum"):
        stages = train_config(lengths_only).stages()
        lengths = "through a curriculum of lengths " + ", ".join(
            str(s["max_length"]) if s["min_length"] == s["max_length"] else f"{s['min_length']}..{s['max_length']}"
            for s in stages
        )
        steps = stages[-1]["end"]
    else:
        lengths = "on lengths " + train_lengths_text(lengths_only)
    width = defaults.get("d_model", defaults.get("width"))
    model = (
        f"d_model {width}"
        if width
        else f"{defaults['params']:g} parameters per layer"
        if "params" in defaults
        else "model defaults"
    ) + f", {defaults.get('num_layers', 1)} layer(s)"
    own = [t for t in tasks if isinstance(t, dict) and ("train" in t or "eval" in t)]
    own_lrs = "".join(
        f" ({m['name']} {_join(m['lrs'])})" for m in spec["models"] if isinstance(m, dict) and m.get("lrs")
    )
    own_train = [
        f"{m['name']}: " + ", ".join(f"{k} {v}" for k, v in m["train"].items())
        for m in spec["models"]
        if isinstance(m, dict) and m.get("train")
    ]
    return (
        f"tasks {'; '.join(names)}; trained {lengths}"
        + (" (some tasks set their own lengths)" if own else "")
        + f", {steps} steps, batch {train.get('batch_size', '-')}; {model}; "
        f"lr {_join(spec['lrs'])}{own_lrs}; seeds {_join(spec['seeds'])}; "
        f"evaluated at {_join(evaluate.get('lengths', []))} ({evaluate.get('samples', 512)} samples per length)"
        + (f"; models' own training settings: {'; '.join(own_train)}" if own_train else "")
    )


# ---- the book ------------------------------------------------------------------------------------
PAGES = "experiments"  # the folder of the book's pages, one per experiment, under the book's folder
RULES_ANCHOR = "how-a-verdict-is-read"  # the claims page's section that states the rules

RULES = """\
## How a verdict is read

- The `quick` scale is a small CPU version of each paper's setting (see each experiment's settings);
  it tests the papers' qualitative claims, not their exact numbers. The `paper` scale has the
  papers' sizes and needs GPUs.
- Figures are what each experiment's spec names: scaled accuracy (acc - chance) / (1 - chance)
  (0 = chance, 1 = perfect) unless the table says otherwise (sequence accuracy, the longest length
  extrapolated to, a metric such as the total-variation distance).
- A claim is tested seed by seed at the selected learning rate, at every planned evaluation length
  of its range (a claim about extrapolation needs a length beyond the training lengths), and its
  seed rule decides: in most seeds (the default), in every seed, or in the best seed where the
  paper itself reports a best-of. "k of N seeds" counts the seeds that pass.
- One rule for every kind of claim (a verdict rests on models that learned what they were trained
  on): every run is evaluated at its longest training length, where a seed fits when its figure
  there (the claim's accuracy measure; scaled accuracy for a claim on an analysis figure) reaches
  the claim's fit threshold (0.9 unless the spec sets another). A claim is
{kinds}
- When the seeds that fit are too few to decide, the claim is "inconclusive" and says which model
  did not fit, with its figures at the training length; the seeds that did not fit are set aside,
  never counted for or against.
- A tie between learning rates on the training lengths is shown as a tie ("tied on the training
  lengths with lr ..."), and the claim holds only where it holds at every tied rate.
- Two readings where the paper reports under a protocol of its own: the verdict is the strict
  reading above; the column "paper's protocol" reads the same claim as the paper reports, quoted on
  its experiment's page (the best of its rates, picked on the claim's own figure, which may
  select on the test lengths, and the best of its seeds), and "-" where the paper states none.
- ✓: the claim holds; ✗: it does not; "inconclusive": the fit rule left it undecided; "not
  measured": a run or a planned length it needs is missing; "not run at this scale": it names a
  model, task or scale this scale does not run; "not in this run": it names a model or task that
  the run's overrides left out.
- Measured: {measured}.
- Each ✗ and inconclusive claim ends its row with its reason, one of three: a genuine result at
  this scale (the probes rule out the budget and the protocol), the paper's protocol (its own
  reading, in the column beside, differs), or the budget (the models did not fit at this scale's
  budget). The experiment's notes and probes say how each was established.
- A ✗ at the quick scale says what the small run shows, not that the paper is wrong."""

_KINDS = list(KIND_TEXT.values())
RULES = RULES.replace(
    "{kinds}", "\n".join(f"  - {text}{';' if text != _KINDS[-1] else '.'}" for text in _KINDS)
).replace("{measured}", MEASURED_KEY)


def probes_table(probes: list[dict]) -> str:
    """The probes behind an experiment's notes as one table: setting, command, figure (and verdict)."""
    with_verdict = any(p["verdict"] for p in probes)
    header = ["probe", "command", "figure"] + (["verdict"] if with_verdict else [])
    body = [
        [p["setting"], f"`{p['command']}`", p["figure"]] + ([p["verdict"] or "-"] if with_verdict else [])
        for p in probes
    ]
    return markdown_table(header, body)


FULL_BUDGET = re.compile(r"\btrain\.early_stop_\w+=null\b")  # a probe's command that turns a stop off


def stopped_line(snapshot: dict, probes: list[dict] | None = None) -> str:
    """How many of the snapshot's runs stopped before their budget: where none did, no verdict
    can rest on early stopping; where some did, whether one of the notes' `probes` trains them with
    the stop turned off (its command sets a `train.early_stop_*` rule to null)."""
    plan = {p["id"]: p for p in snapshot["plan"]}
    runs = [r for r in snapshot["runs"] if r["id"] in plan and r["status"] == "done"]
    stopped = sum(1 for r in runs if r.get("steps") and r["steps"] < (plan[r["id"]].get("steps") or 0))
    if not stopped:
        return f"Early stopping: none of the {len(runs)} runs stopped before its budget, so no verdict rests on a stop."
    compared = any(FULL_BUDGET.search(p.get("command") or "") for p in probes or [])
    said = "the notes' probes compare runs with the stop turned off"
    if not compared:
        said = "no probe turns the stop off yet"
    return f"Early stopping: {stopped} of {len(runs)} runs stopped before their budget; {said}."


def experiment_title(name: str, paper: dict | None) -> str:
    return f"`{name}`" + (f": {paper['source']}" if paper else "")


def page_link(name: str, prefix: str = "") -> str:
    """A link to the experiment's page, from a page in `prefix`'s folder ("docs/" from the README)."""
    return f"[`{name}`]({prefix}{PAGES}/{name}.md)"


def paragraphs(text: str) -> list[str]:
    """A spec's text as paragraphs: its line breaks (a blank line in a folded YAML text) part them."""
    return [" ".join(p.split()) for p in text.strip().split("\n") if p.strip()]


def scored_snapshots(snapshots: dict) -> dict:
    """{(experiment, scale): Scored} of every snapshot: each scored once for every page that shows it."""
    return {key: scored(snapshot) for key, snapshot in snapshots.items()}


def _paper(name: str, scale: str = "quick") -> dict | None:
    raw = _paper_now(name, scale)
    return paper_of({"name": name, "paper": raw}) if raw else None


def _wall_text(snapshot: dict) -> str:
    parts = snapshot.get("parts", [])
    if not parts:
        return "wall time not recorded"
    machines = list(dict.fromkeys(describe_machine(p["machine"]) for p in parts if p.get("machine")))
    workers = parts[-1].get("workers")
    return (
        f"wall time {duration(wall_seconds(snapshot))}"
        + (f" in {len(parts)} parts" if len(parts) > 1 else "")
        + (f" with {workers} worker{'s' if workers != 1 else ''}" if workers else "")
        + (f" on {'; '.join(machines)}" if machines else "")
    )


def _claims_notes(verdicts: list[dict]) -> list[str]:
    """A bullet per claim with a note or an open verdict, by its number in the claims table: the
    reason of a ✗ or inconclusive verdict, then the note."""
    lines = []
    for number, v in enumerate(verdicts, 1):
        reason = v["claim"]["reason"] if v["verdict"] in (FAIL, INCONCLUSIVE) else ""
        said = " ".join(t for t in ((f"Reason: {reason}." if reason else ""), v["claim"]["note"]) if t)
        if said:
            lines.append(f"- Claim {number} ({v['verdict']}): {said}")
    return lines


def scale_section(name: str, scale: str, snapshot: dict | None, s: Scored | None, paper: dict | None) -> list[str]:
    """One scale of an experiment's page: the command, the settings, what was measured and on what,
    the paper's figures beside the measured ones, the claims, the fit and the per-length table."""
    command = f"statetrack reproduce --scale {scale} {name}"
    headline = (_paper(name, "paper") or {}).get("headline") if scale == "paper" else None
    cell = (
        [
            f"Its headline cell, the work's lead figure ([every work's](../claims.md#{HEADLINES_ANCHOR})): "
            f"{headline['model']}"
            + (f" on {headline['task']}" if headline["task"] else "")
            + f", `statetrack reproduce --scale paper --headlines {name}`.",
            "",
        ]
        if headline
        else []
    )
    if snapshot is None or s is None:
        return [f"## {scale} scale", "", f"Not measured at the {scale} scale yet: `{command}`.", ""] + cell
    runs = snapshot["runs"]
    done = sum(r["status"] == "done" for r in runs)
    diverged = sum(r.get("diverged_at") is not None for r in runs)
    failed = sum(r["status"] == "failed" for r in runs)
    md = [
        f"## {scale} scale",
        "",
        "```",
        command,
        "```",
        "",
        f"Settings: {settings_line(snapshot['spec'])}.",
        "",
        f"Measured at git {snapshot['git_rev']}: {done} of {len(snapshot['plan'])} runs done"
        + (f" ({diverged} diverged, scored as chance)" if diverged else "")
        + (f", {failed} failed" if failed else "")
        + f"; {_wall_text(snapshot)}. {stopped_line(snapshot, paper['probes'] if paper else None)}",
        "",
    ] + cell
    if s.paper:
        rules = f"How each verdict is read: [the rules](../claims.md#{RULES_ANCHOR})."
        for title, note, (header, body) in paper_tables(s, rules=rules):
            if title.startswith("Claims"):  # numbered, for the notes on the claims below it
                header, body = ["#"] + header, [[str(i)] + row for i, row in enumerate(body, 1)]
            md += [f"### {title}", "", note, "", markdown_table(header, body), ""]
        notes = _claims_notes(s.verdicts)
        if notes:
            md += ["Notes on the claims:", ""] + notes + [""]
    recorded = all("still_learning" in r for r in runs)
    fit_note, fit = fit_rows(fit_table(s, {r["id"] for r in runs if r.get("still_learning")} if recorded else None))
    if fit[0]:
        md += ["### Fit", "", fit_note, "", markdown_table(*fit), ""]
    if s.summary:
        md += [
            "### Per length",
            "",
            "Headline after selection (" + _selection_text(s.summary) + ").",
            "",
            markdown_table(*table_rows(s.summary, "headline")),
            "",
        ]
    return md


def experiment_page(name: str, description: str, snapshots: dict, scores: dict) -> str:
    """The book's page of one experiment: what the paper claims (the spec's description), one section
    per scale, then the notes' summary and the probes behind it."""
    paper = _paper(name)
    md = [
        f"# {experiment_title(name, paper)}",
        "",
        f"Generated by `statetrack docs --write` from this experiment's committed snapshots; "
        f"[every claim of the book, and how a verdict is read](../claims.md#{RULES_ANCHOR}); "
        "[all experiments](../../README.md#experiments-and-paper-tables); [references](../references.md).",
        "",
    ]
    for paragraph in paragraphs(description):
        md += [paragraph, ""]
    for scale in SCALES:
        md += scale_section(name, scale, snapshots.get((name, scale)), scores.get((name, scale)), paper)
    if paper and (paper["notes"] or paper["probes"]):
        md += ["## Notes", ""]
        md += [paper["notes"], ""] if paper["notes"] else []
        md += [probes_table(paper["probes"]), ""] if paper["probes"] else []
    return "\n".join(md).rstrip() + "\n"


def _selection_text(summary: list[SummaryEntry]) -> str:
    from statetrack.results.selection import describe_selection

    return describe_selection(summary[0]["selection"])


def claims_rows(snapshots: dict, scale: str, scores: dict | None = None) -> tuple[list[str], list[list[str]], dict]:
    """Every claim of every shipped experiment at `scale`: experiment, claim, test, measured, verdict,
    the paper's protocol and, for a ✗ or inconclusive one, its reason; and the count of each verdict.
    A claim on a check is decided at a scale without a snapshot too."""
    header = ["experiment", "claim", "test", "measured", "verdict", "paper's protocol", "reason"]
    body, counts = [], {v: 0 for v in VERDICTS}
    for name in shipped_specs():
        snapshot = snapshots.get((name, scale))
        if snapshot is None:
            paper = _paper(name, scale)
            verdicts = [
                check_verdict(c)  # a check reads no runs: it is computed with or without a snapshot
                if c["measure"].startswith("check:") and (not c["scales"] or scale in c["scales"])
                else {
                    "claim": c,
                    "verdict": NOT_MEASURED,
                    "results": [],
                    "missing": [],
                    "unplanned": [],
                    "reason": f"no snapshot at the {scale} scale",
                }
                for c in (paper or {}).get("claims", [])
            ]
        else:
            verdicts = ((scores or {}).get((name, scale)) or scored(snapshot)).verdicts
        for v in verdicts:
            counts[v["verdict"]] += 1
            open_ = v["verdict"] in (FAIL, INCONCLUSIVE)
            body.append(
                [
                    page_link(name),
                    v["claim"]["text"],
                    claim_test(v["claim"]),
                    claim_measured(v),
                    v["verdict"],
                    protocol_cell(v),
                    (v["claim"]["reason"] or "not stated") if open_ else "-",
                ]
            )
    return header, body, counts


def suite_line(snapshots: dict, scale: str) -> str:
    """How many experiments are measured at `scale`, and their wall time. At the paper scale: of the
    experiments that have one, those whose snapshot holds a finished run (a figure at that scale)."""
    if scale == "paper":
        names = paper_scaled()
        measured = [s for (name, sc), s in snapshots.items() if sc == scale and name in names and _done(s)]
        counted = f"{len(measured)} of {len(names)} experiments with a paper-scale figure"
    else:
        measured = [s for (name, sc), s in snapshots.items() if sc == scale and name in shipped_specs()]
        counted = f"{len(measured)} of {len(shipped_specs())} experiments measured at the {scale} scale"
    return f"{counted}; their wall time adds up to {duration(sum(wall_seconds(s) for s in measured))}."


def _done(snapshot: dict) -> bool:
    return any(r["status"] == "done" for r in snapshot["runs"])


# ---- the headline cells --------------------------------------------------------------------------
HEADLINES_ANCHOR = "headline-cells"  # the claims page's section of the headline cells


def _setting(spec: dict, key: str):
    """The value at a key path ("train.steps") of a spec, None where it has none."""
    for part in key.split("."):
        spec = spec.get(part) if isinstance(spec, dict) else None  # type: ignore[assignment]
    return spec


def headline_cells(snapshots: dict, scores: dict) -> list[dict]:
    """Each work's headline cell (`statetrack.experiments.headlines`) with what its experiment's
    paper-scale snapshot measured of it: {experiment, headline, measure, planned (seeds of the paper
    scale), seeds (those whose every run of the cell is done), partial ((runs done, runs planned) of
    the cell when a seed has some of its runs done and not all, else None), measured (the figure
    `paper.measure` reads, None before any), fitted (measured at the `largest_fit` settings), snapshot}."""
    from statetrack.experiments.spec import covers

    cells = []
    for name, headline in headlines().items():
        now = spec_now(name, "paper") or {}
        snapshot = snapshots.get((name, "paper"))
        cell = {"experiment": name, "headline": headline, "measure": (now.get("paper") or {}).get("measure", "scaled")}
        cell |= {"planned": len(now.get("seeds") or []), "seeds": 0, "partial": None, "measured": None, "fitted": False}
        cell["snapshot"] = snapshot
        if snapshot is not None:
            task = headline["task"]
            entries = [
                e for e in snapshot["plan"] if covers(headline["model"], e["model"]) and task in (None, e["task"])
            ]
            status = {r["id"]: r["status"] for r in snapshot["runs"]}
            by_seed: dict[int, list[bool]] = collections.defaultdict(list)
            for e in entries:
                by_seed[e["seed"]].append(status.get(e["id"]) == "done")
            cell["seeds"] = sum(all(done) for done in by_seed.values())
            if any(0 < sum(done) < len(done) for done in by_seed.values()):
                runs = [d for done in by_seed.values() for d in done]
                cell["partial"] = (sum(runs), len(runs))
            s = scores[(name, "paper")]
            if s.paper is not None:
                rows = [
                    r
                    for r in paper_figures(s.paper, s.summary, s.planned)
                    if r["run"] and covers(headline["model"], r["model"]) and task in (None, r["task"])
                ]
                cell["measured"] = rows[0]["measured"] if rows else None
            fit = (headline["largest_fit"] or {}).get("settings") or {}
            cell["fitted"] = bool(fit) and all(_setting(snapshot["spec"], k) == v for k, v in fit.items())
        cells.append(cell)
    return cells


def _cell_name(cell: dict, prefix: str = "") -> str:
    """The cell's experiment page (linked from a page in `prefix`'s folder), model and task."""
    headline = cell["headline"]
    task = f" on {headline['task']}" if headline["task"] else ""
    return f"{page_link(cell['experiment'], prefix)}: {headline['model']}{task}"


def _seeds_text(cell: dict) -> str:
    """The seeds measured of those planned, and the runs done where a seed is measured in part (a
    cell whose seed trains several runs, one per rate)."""
    partial = f" ({cell['partial'][0]} of {cell['partial'][1]} runs)" if cell["partial"] else ""
    return f"{cell['seeds']} of {cell['planned']}{partial}"


def _cell_text(cell: dict) -> str:
    """The cell in words, with the largest scale that fits beside the paper scale's where it has one."""
    fit = cell["headline"]["largest_fit"]
    if not fit:
        return _cell_name(cell)
    paper = spec_now(cell["experiment"], "paper") or {}
    changed = ", ".join(f"{k} {v} (the paper scale's {_setting(paper, k)})" for k, v in fit["settings"].items())
    return f"{_cell_name(cell)}; the largest scale that fits one machine: {changed}"


def headlines_table(cells: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The headline cells as a table: the work, the cell, the paper's figure (quoted), the measured
    one (or "not measured yet"), the seeds measured of those planned, the wall time, the machine and
    the revision of the measurement."""
    header = ["work", "cell", "paper", "measured", "seeds", "wall time", "machine", "revision"]
    body = []
    for cell in cells:
        headline, snapshot = cell["headline"], cell["snapshot"]
        measured = "not measured yet"
        if cell["measured"] is not None:
            measured = figure_text(cell["measured"], cell["measure"]) + (
                " (the largest scale that fits)" if cell["fitted"] else ""
            )
        parts = snapshot.get("parts", []) if snapshot else []
        machines = list(dict.fromkeys(describe_machine(p["machine"]) for p in parts if p.get("machine")))
        body.append(
            [
                headline["source"],
                _cell_text(cell),
                f'{figure_text(headline["figure"], cell["measure"])} ("{headline["quote"]}")',
                measured,
                _seeds_text(cell),
                duration(wall_seconds(snapshot)) if parts else "-",
                "; ".join(machines) or "-",
                snapshot["git_rev"] if snapshot and cell["seeds"] else "-",
            ]
        )
    return header, body


def headlines_section(snapshots: dict, scores: dict) -> list[str]:
    """The claims page's section of the headline cells (under its paper scale)."""
    cells = headline_cells(snapshots, scores)
    measured = sum(1 for c in cells if c["seeds"])
    in_part = sum(1 for c in cells if c["measured"] is not None and not c["seeds"])
    md = [
        "### Headline cells",
        "",
        "One cell per work: the figure its abstract or main table leads with, as one model on one task at the "
        "paper's scale (or, where that does not fit one machine, the largest scale that does, named beside the "
        "paper's). `statetrack reproduce --scale paper --headlines` trains them, every cell's first seed before "
        f"any cell's second. {measured} of {len(cells)} cells measured"
        + (f" ({in_part} more in part: a seed with some of its runs done)" if in_part else "")
        + ". Measured: the paper scale's figure "
        "(each experiment's `paper.measure` over its lengths, as its page's \"Paper vs measured\" reads it).",
        "",
        markdown_table(*headlines_table(cells)),
        "",
    ]
    notes = [f"- {page_link(c['experiment'])}: {c['headline']['note']}." for c in cells if c["headline"]["note"]]
    if notes:
        md += ["Where a measured figure falls short of the paper's:", "", *notes, ""]
    fits = [
        f"- {page_link(c['experiment'])}: {c['headline']['largest_fit']['reason']}."
        for c in cells
        if c["headline"]["largest_fit"]
    ]
    if fits:
        md += [
            "Where the paper's scale does not fit one machine (24 GiB, about 6 CPU hours a seed). The hours are "
            "the training arithmetic of `statetrack reproduce --scale paper --headlines --dry-run` at 27 GFLOP/s a "
            "core, the rate of negeig-parity's paper scale as `benchmarks/paper_hours.py` timed it on a 2-core "
            "machine (6.4 PFLOP in 32.9 h; [its table](scaling.md#how-long-the-paper-scale-takes)):",
            "",
            *fits,
            "",
        ]
    return md


def claims_page(snapshots: dict, scores: dict) -> str:
    """docs/claims.md: how a verdict is read, stated once, then every claim of every experiment per scale."""
    md = [
        "# Claims",
        "",
        "Every claim of every shipped experiment and its verdict, generated by `statetrack docs --write` from "
        f"the committed snapshots (one per experiment and scale, in the package's `{SNAPSHOTS}/`); a test checks "
        "that this page equals its generation. Each experiment's page, linked from its name, has its settings, "
        "figures, notes and probes; `statetrack reproduce --scale quick [EXPERIMENT ...]` measures them again.",
        "",
        RULES,
        "",
    ]
    for scale in SCALES:
        header, body, counts = claims_rows(snapshots, scale, scores)
        total = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        md += [f"## {scale} scale", "", suite_line(snapshots, scale) + f" Claims: {total}.", ""]
        if scale == "paper":
            md += headlines_section(snapshots, scores)
        md += [markdown_table(header, body), ""]
    return "\n".join(md).rstrip() + "\n"


def book_pages(snapshots: dict, scores: dict | None = None) -> dict[str, str]:
    """{path under the book's folder: text} of the generated pages: claims.md and one page per
    shipped experiment (experiments/NAME.md)."""
    scores = scored_snapshots(snapshots) if scores is None else scores
    pages = {"claims.md": claims_page(snapshots, scores)}
    for name, description in shipped_specs().items():
        pages[f"{PAGES}/{name}.md"] = experiment_page(name, description, snapshots, scores)
    return pages


# ---- the README's generated blocks ---------------------------------------------------------------
def readme_blocks(snapshots: dict, scores: dict | None = None) -> dict[str, str]:
    """{block name: text} of the README's generated blocks: `demo` (the demo's headline table and
    verdicts at the quick scale) and `experiments` (the index of the book's pages: one row per
    shipped experiment, its claims' verdicts at the quick scale and its wall time)."""
    from statetrack.results.tables import text_table

    scores = scored_snapshots(snapshots) if scores is None else scores
    blocks = {}
    demo = snapshots.get(("demo", "quick"))
    if demo is not None:
        s = scores[("demo", "quick")]
        blocks["demo"] = "\n".join(
            [
                f"Measured (wall time {duration(wall_seconds(demo))}; its page: "
                f"[docs/{PAGES}/demo.md](docs/{PAGES}/demo.md)):",
                "",
                "```",
                text_table(*table_rows(s.summary, "headline")),
                f"({_selection_text(s.summary)})",
                "",
                f"did it reproduce? {verdict_line(s.verdicts)}",
                "```",
            ]
        )
    header = ["experiment", "reproduces", "quick-scale claims", "wall time (quick)"]
    body = []
    for name in shipped_specs():
        snapshot = snapshots.get((name, "quick"))
        paper = _paper(name)
        body.append(
            [
                page_link(name, "docs/"),
                paper["source"] if paper is not None else "-",
                verdict_line(scores[(name, "quick")].verdicts) if snapshot else "not measured yet",
                duration(wall_seconds(snapshot)) if snapshot and snapshot.get("parts") else "-",
            ]
        )
    blocks["experiments"] = "\n".join(
        [
            markdown_table(header, body),
            "",
            suite_line(snapshots, "quick"),
            "Every claim with its verdict, and how a verdict is read: [docs/claims.md](docs/claims.md).",
        ]
    )
    return blocks


def book_files(book_dir: str | Path, readme: str | Path | None, snapshots: dict) -> tuple[dict, dict]:
    """What the book generates: ({path: text, or None for a page of an experiment no longer shipped},
    {the README's path: its blocks}) (no README where `readme` is None or does not exist)."""
    book_dir = Path(book_dir)
    scores = scored_snapshots(snapshots)
    pages: dict[Path, str | None] = {book_dir / name: text for name, text in book_pages(snapshots, scores).items()}
    pages |= {path: None for path in sorted((book_dir / PAGES).glob("*.md")) if path not in pages}
    blocks = {}
    if readme is not None and Path(readme).exists():
        blocks[Path(readme)] = readme_blocks(snapshots, scores)
    if (book_dir / SCALING).exists():
        blocks[book_dir / SCALING] = {"paper-hours": paper_hours_block(snapshots, scores)}
    return pages, blocks


SCALING = "scaling.md"  # the page (under the book's folder) whose `paper-hours` block is the measured hours


def paper_hours_block(snapshots: dict, scores: dict) -> str:
    """The hours each headline cell took at the paper scale, from its snapshot: the seeds measured,
    the wall time of its parts and the core-hours (wall time x workers), the machine."""
    header = ["headline cell", "seeds measured", "wall time", "CPU hours measured", "machine"]
    body = []
    for cell in headline_cells(snapshots, scores):
        parts = cell["snapshot"].get("parts", []) if cell["snapshot"] else []
        machines = list(dict.fromkeys(describe_machine(p["machine"]) for p in parts if p.get("machine")))
        hours = sum(p["seconds"] * (p.get("workers") or 1) for p in parts) / 3600
        body.append(
            [
                _cell_name(cell),
                _seeds_text(cell),
                duration(wall_seconds(cell["snapshot"])) if parts else "-",
                f"{hours:.1f}" if parts else "not measured yet",
                "; ".join(machines) or "-",
            ]
        )
    return markdown_table(header, body)


def write_book(
    book_dir: str | Path = BOOK_DIR,
    readme: str | Path | None = "README.md",
    check: bool = False,
    snapshots: str | Path | None = None,
) -> list[Path]:
    """Write the generated pages (and the README's blocks, where `readme` exists) from the snapshots
    in the folder `snapshots` (default: the package's); with `check`, write nothing and return the
    files whose text differs from their generation."""
    pages, blocks = book_files(book_dir, readme, read_snapshots(snapshots))
    wanted = dict(pages)
    for path, named in blocks.items():
        wanted[path] = fill_blocks(path.read_text(), named, path, strict=False)
    return sync(wanted, check)
