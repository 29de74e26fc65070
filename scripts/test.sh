#!/usr/bin/env bash
# Install what the template's tests need into .venv (created if missing), then run them.
# Extra arguments go to pytest: `bash scripts/test.sh -k render -x`. The tests run in
# parallel, a worker per CPU core, 4 at most (pytest-xdist); `-n 0` runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
export WANDB_MODE=offline
# pytest keeps each test module it rewrites (assertion rewriting) as bytecode in
# __pycache__, and the suite starts about 18 pytest runs over the same library tests and
# renders. With PYTHONDONTWRITEBYTECODE set (some CI images and containers set it),
# every one of them rewrites and compiles them again: 1.5 s of CPU for each collection of
# the library's suite. The folders are git-ignored here and in every render.
unset PYTHONDONTWRITEBYTECODE
exec "$py" -m pytest -n auto --maxprocesses 4 "$@"
