#!/usr/bin/env bash
# Install what the template's tests need into .venv (created if missing), then run them.
# Extra arguments go to pytest: `bash scripts/test.sh -k render -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
py="$PWD/.venv/bin/python"
"$py" -m pip install -q --upgrade "pip>=25.1"
# The CPU build of torch first: a plain `pip install torch` pulls GBs of CUDA wheels.
"$py" -c "import torch" 2>/dev/null \
  || "$py" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
"$py" -m pip install -q --group test
export WANDB_MODE=offline
exec "$py" -m pytest "$@"
