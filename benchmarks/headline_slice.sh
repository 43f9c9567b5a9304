#!/usr/bin/env bash
# One slice of the works' headline cells at the paper scale (`statetrack reproduce --scale paper
# --headlines`), made to run in the background beside other work and to resume next session:
#
#   nohup bash benchmarks/headline_slice.sh SECONDS > headline_slice.log 2>&1 &
#
# from the repository root of a clean checkout (the runs record its revision). In order:
#   1. when results/headlines has no store, unpacks benchmarks/slices/paper-headlines.tar.gz into it
#      (the earlier sessions' store and paused checkpoints);
#   2. trains for SECONDS (`--stop-after`: a run in flight then saves its checkpoint and pauses) on one
#      worker with one torch thread, under nice, writing each cell's snapshot (the package's
#      snapshots/EXPERIMENT.paper.json: every part's wall time and machine) and the book;
#   3. packs results/headlines into benchmarks/slices/paper-headlines.tar.gz (benchmarks/pack_slice.py;
#      without the paused checkpoints when they do not fit its limit: those runs start again).
# Then commit the archive, the paper-scale snapshots and the docs (`statetrack docs --write`); the same
# command next session goes on where this one stopped. DEVICE=cuda trains on a GPU
# (benchmarks/gpu_session.sh runs this first when one is lent); RESULTS, ARCHIVE and PYTHON name
# other places (FROM: the archive a session starts from, default ARCHIVE); EXPERIMENTS names some
# cells only (default: every one); LIMIT_MIB is the largest archive pack_slice writes (default 24:
# repl-traces' paused checkpoint alone is 15.9 MB, over pack_slice's own default of 16).
set -u
SECONDS_LEFT=${1:?give the seconds to train, e.g. 20000}
RESULTS=${RESULTS:-results/headlines}
ARCHIVE=${ARCHIVE:-benchmarks/slices/paper-headlines.tar.gz}
FROM=${FROM:-$ARCHIVE}
DEVICE=${DEVICE:-cpu}
PYTHON=${PYTHON:-python}
EXPERIMENTS=${EXPERIMENTS:-}
LIMIT_MIB=${LIMIT_MIB:-24}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
if [ -f "$FROM" ] && [ ! -f "$RESULTS/statetrack.db" ]; then
    "$PYTHON" benchmarks/pack_slice.py --unpack "$FROM" "$RESULTS" || exit 1
fi
echo "== headline cells for $SECONDS_LEFT s on $DEVICE, one worker, one thread ($(date -u +%FT%TZ))"
# shellcheck disable=SC2086  # EXPERIMENTS is a list of names
nice -n 10 "$PYTHON" -c "from statetrack.cli import main; raise SystemExit(main())" reproduce --scale paper \
    --headlines $EXPERIMENTS --workers 1 --device "$DEVICE" --stop-after "$SECONDS_LEFT" --results-dir "$RESULTS" \
    --no-progress
status=$?
echo "== reproduce: exit $status ($(date -u +%FT%TZ))"
if [ -f "$RESULTS/statetrack.db" ]; then
    mkdir -p "$(dirname "$ARCHIVE")"
    "$PYTHON" benchmarks/pack_slice.py --limit-mib "$LIMIT_MIB" "$RESULTS" "$ARCHIVE" \
        || "$PYTHON" benchmarks/pack_slice.py --limit-mib "$LIMIT_MIB" --without-checkpoints "$RESULTS" "$ARCHIVE" \
        || exit 1
fi
echo "commit: git add $ARCHIVE src/statetrack/experiments/snapshots/*.paper.json docs README.md"
exit $status
