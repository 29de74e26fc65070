#!/usr/bin/env bash
# Install what the template's tests need into .venv (created if missing), then run them.
# Extra arguments go to pytest: `bash scripts/test.sh -k render -x`. The tests run in
# parallel, a worker per CPU core, 4 at most (pytest-xdist); `-n 0` runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
export WANDB_MODE=offline
exec "$py" -m pytest -n auto --maxprocesses 4 "$@"
