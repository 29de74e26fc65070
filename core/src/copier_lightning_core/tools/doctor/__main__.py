"""`python -m copier_lightning_core.tools.doctor`: the entry pre-commit calls, without importing torch first."""

import sys

from .command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
