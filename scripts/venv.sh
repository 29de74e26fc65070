# Sourced by demo.sh and test.sh: make .venv (if missing) with what the template needs,
# and set $py to its interpreter.
#
# torch comes from, in this order: an install that is already there (in .venv, or in the
# python3 that makes .venv, which .venv then sees through --system-site-packages); the
# package index pip is configured with (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS
# or `pip config`: a mirror, a wheel folder); else PyTorch's CPU wheel index, since a
# plain `pip install torch` from PyPI pulls GBs of CUDA wheels. One line says which.
# pip's config is read into a variable, then matched: under the callers' `pipefail`,
# `pip config list | grep -q` fails whenever grep exits at its match before pip has
# written everything (pip dies of SIGPIPE), which sent a configured (often offline)
# machine to PyTorch's index, through minutes of retries.
if [ ! -x .venv/bin/python ]; then
  if python3 -c "import torch" 2>/dev/null; then
    python3 -m venv --system-site-packages .venv
  else
    python3 -m venv .venv
  fi
fi
py="$PWD/.venv/bin/python"
"$py" -m pip install -q --upgrade "pip>=25.1"
torch_cpu_index=https://download.pytorch.org/whl/cpu
if torch_version=$("$py" -c "import torch; print(torch.__version__)" 2>/dev/null); then
  echo "torch: $torch_version, already installed"
elif pip_config=$("$py" -m pip config list 2>/dev/null) &&
  [[ $pip_config =~ \.(index-url|extra-index-url|find-links)= ]]; then
  echo "torch: from the package index pip is configured with (see: pip config list)"
  "$py" -m pip install -q torch
else
  echo "torch: the CPU build, from $torch_cpu_index (configure a pip index to use another)"
  "$py" -m pip install -q torch --index-url "$torch_cpu_index"
fi
# Whatever else asks for torch (transformers, for the conformance matrix) gets the one
# installed: an unpinned resolve may swap it for a multi-GB CUDA build.
torch_pin="$(mktemp)"
"$py" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" >"$torch_pin"
"$py" -m pip install -q --group test -c "$torch_pin"
rm -f "$torch_pin"
