# Sourced by demo.sh and test.sh: make .venv (if missing) with what the template needs,
# and set $py to its interpreter.
#
# torch comes from, in this order: an install that is already there (in .venv, or in the
# python3 that makes .venv, which .venv then sees through --system-site-packages); on a
# machine without an NVIDIA GPU, the newest CPU build (`+cpu`) the package index pip is
# configured with offers (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS or `pip
# config`: a mirror, a wheel folder); with a GPU, whatever that configured index serves;
# else PyTorch's CPU wheel index. A plain `pip install torch` on Linux pulls the CUDA build
# and gigabytes of CUDA wheels, useless without a GPU, even from an index that also holds
# the CPU build (its version, `2.13.0+cpu`, sorts below a CUDA `2.14.1`). One line says which.
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

# The driver installs nvidia-smi and makes /proc/driver/nvidia: either one means a GPU.
has_nvidia_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia ]
}

# The newest `+cpu` version of torch among those pip lists from its configured sources
# (compatible wheels only; newest first), or nothing.
newest_cpu_torch() {
  local listed versions version
  listed=$("$py" -m pip index versions torch 2>/dev/null) || return 0
  [[ $listed == *"Available versions: "* ]] || return 0
  listed=${listed#*Available versions: }
  IFS=', ' read -r -a versions <<<"${listed%%$'\n'*}"
  for version in "${versions[@]}"; do
    if [[ $version == *+cpu* ]]; then
      echo "$version"
      return 0
    fi
  done
}

configured_index=""
if pip_config=$("$py" -m pip config list 2>/dev/null) &&
  [[ $pip_config =~ \.(index-url|extra-index-url|find-links)= ]]; then
  configured_index=1
fi
if torch_version=$("$py" -c "import torch; print(torch.__version__)" 2>/dev/null); then
  echo "torch: $torch_version, already installed"
elif ! has_nvidia_gpu && [ -n "$configured_index" ] &&
  torch_cpu_version=$(newest_cpu_torch) && [ -n "$torch_cpu_version" ]; then
  echo "torch: the CPU build $torch_cpu_version (no NVIDIA GPU here), from the package index pip is configured with (see: pip config list)"
  "$py" -m pip install -q "torch==$torch_cpu_version"
elif has_nvidia_gpu && [ -n "$configured_index" ]; then
  echo "torch: from the package index pip is configured with (see: pip config list)"
  "$py" -m pip install -q torch
else
  if [ -n "$configured_index" ]; then
    why="no NVIDIA GPU here, and the package index pip is configured with offers no +cpu build"
  else
    why="configure a pip index to use another"
  fi
  echo "torch: the CPU build, from $torch_cpu_index ($why)"
  "$py" -m pip install -q torch --index-url "$torch_cpu_index"
fi
# Whatever else asks for torch (transformers, for the conformance matrix) gets the one
# installed: an unpinned resolve may swap it for a multi-GB CUDA build.
torch_pin="$(mktemp)"
"$py" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" >"$torch_pin"
# --no-compile: pip compiles every module of every package it installs (moto, botocore,
# mlflow, wandb, transformers: tens of thousands), half of these installs' time (measured:
# 46 s against 22 s for the test group), though the suite imports a small part of them.
# Python compiles a module when first imported and keeps it (scripts/test.sh lets it
# write bytecode). torch, which every process imports, keeps pip's compiled bytecode.
"$py" -m pip install -q --no-compile --group test -c "$torch_pin"
# The conformance matrix's architectures (the `zoo` group: transformers, peft, torch_geometric,
# MONAI) go into .venv/zoo, off the default path; the tests that build them add it to theirs
# (tests/conftest.py: ZOO, with_zoo). Installed where .venv sees them, they would cost every
# process of the suite about 1 s at `import lightning` (torchmetrics imports transformers
# when it is installed). pip, told the zoo is on the path, reports what is still missing,
# the zoo's own dependencies included; exactly that goes into the folder, nothing twice.
zoo="$PWD/.venv/zoo"
zoo_report="$(mktemp)"
PYTHONPATH="$zoo" "$py" -m pip install -q --dry-run --report "$zoo_report" --group zoo -c "$torch_pin"
zoo_missing=$("$py" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(item["metadata"]["name"] + "==" + item["metadata"]["version"])
' "$zoo_report")
if [ -n "$zoo_missing" ]; then
  # shellcheck disable=SC2086  # a requirement per word
  "$py" -m pip install -q --no-compile --no-deps --upgrade --target "$zoo" $zoo_missing
fi
rm -f "$torch_pin" "$zoo_report"
# The projects' run library, built from this checkout (core/) and installed editable, so
# the renders' pin `copier-lightning-core~=X.Y.Z` is met without a release on the index
# and a change under core/ is what the next command runs. Its dependencies are in the
# `test` group above.
"$py" -m pip install -q --no-deps --no-build-isolation -e ./core
