#!/usr/bin/env bash
# Install what the template's tests need into .venv (created if missing), then run them.
# Extra arguments go to pytest: `bash scripts/test.sh -k render -x`. The tests run in
# parallel (pytest-xdist), a worker per CPU core and one more, 4 at most: a worker spends
# part of its time waiting on the processes its tests start (a sub-pytest, a kill, a
# signal), and the extra one keeps the cores busy then. `-n 0` runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
export WANDB_MODE=offline
cores=$("$py" -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
exec "$py" -m pytest -n "$(( cores + 1 < 4 ? cores + 1 : 4 ))" "$@"
