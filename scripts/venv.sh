# Sourced by demo.sh and test.sh: make .venv (if missing) with what the template needs,
# and set $py to its interpreter.
[ -x .venv/bin/python ] || python3 -m venv .venv
py="$PWD/.venv/bin/python"
"$py" -m pip install -q --upgrade "pip>=25.1"
# The CPU build of torch first: a plain `pip install torch` pulls GBs of CUDA wheels.
"$py" -c "import torch" 2>/dev/null \
  || "$py" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
"$py" -m pip install -q --group test
