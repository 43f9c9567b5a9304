#!/usr/bin/env bash
# One time-limited GPU session's measurements, prepared to run as one command from the repository
# root of a machine with a CUDA torch and no network; everything it keeps is written under $OUT.
#
#   OUT=/path/to/out bash benchmarks/gpu_session.sh [SECONDS]    # default 540
#
# In order, each bounded by what is left of SECONDS:
#  00. the works' headline cells first, for HEADLINES seconds (default two thirds of SECONDS; 0 skips
#      it): benchmarks/headline_slice.sh from the committed benchmarks/slices/paper-headlines.tar.gz
#      into results/headlines, packed into $OUT/paper-headlines.tar.gz, and the paper-scale snapshots
#      it wrote (their parts: this session's wall time on the GPU) copied to $OUT/snapshots/. Commit
#      both as benchmarks/slices/paper-headlines.tar.gz and src/statetrack/experiments/snapshots/.
#   0. fla-core's kernels behind the delta-rule ops against our references (`-m cuda
#      tests/ops/test_fla_kernels.py`; skipped unless fla-core is installed) -> $OUT/fla_kernels.txt
#   1. the batching lever: each model's step time with the quick batch x 1, 8 and 64
#      (benchmarks/train_step.py --batch-scaling) -> $OUT/train_step_batch_cuda.json
#   2. the paper scale's device hours, cheapest experiments first, a third of the time left
#      (benchmarks/paper_hours.py --budget) -> $OUT/paper_hours_cuda.json
#   3. a slice of the cheapest paper-scale experiment (`statetrack reproduce --scale paper
#      --stop-after`) into results/paper, packed by benchmarks/pack_slice.py into
#      $OUT/$EXPERIMENT.tar.gz (the store and the paused runs' checkpoints; at most 16 MiB).
#      Commit that archive as benchmarks/slices/$EXPERIMENT.tar.gz: the next session unpacks it into
#      results/paper (when that has no store) and the same command resumes the slice.
# Wheels the machine lacks go in wheels/ (pip download on a machine with a network, e.g.
# `pip download fla-core einops --no-deps -d wheels`, and carry wheels/); they are installed from
# there, without the network. DEVICE=cpu runs the same steps on a CPU (a rehearsal:
# DEVICE=cpu HOURS="pfsa-belief demo" OUT=/tmp/out bash benchmarks/gpu_session.sh 300; some paper-scale
# settings do not fit a 24 GiB CPU machine).
set -u
OUT=${OUT:?set OUT to the folder that comes back}
BUDGET=${1:-540}
DEVICE=${DEVICE:-cuda}
EXPERIMENT=${EXPERIMENT:-pfsa-belief}  # the paper-scale slice's
HOURS=${HOURS:-}  # the experiments paper_hours.py times (default: all; a CPU rehearsal names small ones)
HEADLINES=${HEADLINES:-$((BUDGET * 2 / 3))}  # seconds for the headline cells, first
PYTHON=${PYTHON:-python}
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
mkdir -p "$OUT"
if [ -d wheels ]; then
    "$PYTHON" -m pip install -q --no-index --find-links wheels --no-deps wheels/*.whl 2>&1 | tail -3
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" STATETRACK_NO_SIZE_LIMIT=1
"$PYTHON" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"

if [ "$HEADLINES" -gt 90 ]; then
    echo "== the headline cells ($HEADLINES s of $(left) s left)"
    RESULTS=results/headlines FROM=benchmarks/slices/paper-headlines.tar.gz ARCHIVE="$OUT/paper-headlines.tar.gz" \
        DEVICE="$DEVICE" PYTHON="$PYTHON" bash benchmarks/headline_slice.sh $((HEADLINES - 60)) \
        || echo "headline cells: exit $?"
    mkdir -p "$OUT/snapshots"
    cp src/statetrack/experiments/snapshots/*.paper.json "$OUT/snapshots/" 2>/dev/null || echo "no paper-scale snapshot yet"
fi

if [ "$DEVICE" = cuda ]; then
    echo "== fla-core's kernels ($(left) s left)"
    timeout $(($(left) / 6)) "$PYTHON" -m pytest -q -m cuda tests/ops/test_fla_kernels.py -p no:cacheprovider \
        > "$OUT/fla_kernels.txt" 2>&1 || echo "fla kernels: exit $? (see fla_kernels.txt)"
    tail -3 "$OUT/fla_kernels.txt"
fi

echo "== batch scaling ($(left) s left)"
timeout $(($(left) / 4)) "$PYTHON" benchmarks/train_step.py --device "$DEVICE" --batch-scaling 1 8 64 --lengths 64 \
    --layers 1 --steps 5 --warmup 2 --json > "$OUT/train_step_batch_cuda.json" 2> "$OUT/train_step_batch_cuda.log" \
    || echo "batch scaling: stopped (exit $?; the JSON holds the models measured at every k)"
tail -1 "$OUT/train_step_batch_cuda.log"

echo "== paper hours ($(left) s left)"
"$PYTHON" benchmarks/paper_hours.py $HOURS --device "$DEVICE" --budget $(($(left) / 3)) --json > "$OUT/paper_hours_cuda.json" \
    || echo "paper hours: exit $?"

echo "== a paper-scale slice of $EXPERIMENT ($(left) s left)"
if [ -f "benchmarks/slices/$EXPERIMENT.tar.gz" ] && [ ! -f results/paper/statetrack.db ]; then
    "$PYTHON" benchmarks/pack_slice.py --unpack "benchmarks/slices/$EXPERIMENT.tar.gz" results/paper
fi
slice=$(($(left) - 60))  # the report and the copy after it
if [ "$slice" -gt 30 ]; then
    "$PYTHON" -c "from statetrack.cli import main; raise SystemExit(main())" reproduce --scale paper "$EXPERIMENT" --device "$DEVICE" --stop-after "$slice" \
        --results-dir results/paper --book-dir "$OUT/book" --readme "$OUT/README.md" --no-progress || echo "slice: exit $?"
fi
[ -f results/paper/statetrack.db ] && "$PYTHON" benchmarks/pack_slice.py results/paper "$OUT/$EXPERIMENT.tar.gz"
echo "== done in $(($(date +%s) - start)) s"
