"""`python -m copier_lightning_core.tools.doctor`: the entry pre-commit calls, without importing torch first."""

import sys

from ...platform.refusal import refusals_exit
from .command import main

if __name__ == "__main__":
    with refusals_exit():  # a refusal (`--static --bad`): its paragraph and status 1
        sys.exit(main(sys.argv[1:]))
