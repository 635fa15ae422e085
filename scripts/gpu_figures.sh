#!/usr/bin/env bash
# Every rljax benchmark at accelerator sizes (65,536 seeds, batch-1,024 search, the 10 M
# parameter decoder) in under 10 minutes, into one JSON file. Usage, on the GPU machine:
#
#   scripts/gpu_figures.sh OUT.json            # preset gpu
#   scripts/gpu_figures.sh OUT.json --preset tiny --only stats   # extra flags pass through
#
# The machine may have no network: the peers the benchmarks compare against (mctx,
# rliable, rejax, gymnax, ...) travel as wheels in .whl/ (scripts/gpu_wheels.sh fetches
# them where pip works); when .whl/ exists they are installed into /tmp/site first. A
# benchmark whose peer is missing is recorded as "missing", never fatal.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/gpu_figures.sh OUT.json [flags of scripts/gpu_figures.py]}"
shift
py="${PYTHON:-python3}"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec timeout 590 "$py" scripts/gpu_figures.py --out "$out" "$@"
