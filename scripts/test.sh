#!/usr/bin/env bash
# Install what the template's tests need into .venv (created if missing), then run them.
# Extra arguments go to pytest: `bash scripts/test.sh -k render -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
export WANDB_MODE=offline
exec "$py" -m pytest "$@"
