#!/usr/bin/env bash
# Scaffold a demo project from this checkout with the default answers into demo/ (or $1),
# install it, and train the example offline on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
dest="${1:-demo}"
# --vcs-ref HEAD: render this checkout as it is, not its latest tag.
.venv/bin/copier copy --trust --defaults --vcs-ref HEAD -d project_name="Demo" . "$dest"
"$py" -m pip install -q --no-deps --no-build-isolation -e "$dest"
cd "$dest"
WANDB_MODE=offline "$py" -m demo fit --trainer.accelerator=cpu
