# Managed by the template; local edits are merged on update.
"""`python scripts/text_files_only.py MODULE FILE...`: run a fixer of pre-commit-hooks on text.

pre-commit picks a hook's files by name: a file named `.txt` or `.csv` is "text" to it
whatever its bytes, and a whitespace fixer would rewrite a binary file so named. This calls
MODULE's `main` (e.g. `pre_commit_hooks.end_of_file_fixer`) with only the files whose
bytes are all text: no NUL, no control byte other than tab, newlines, form feed, backspace,
bell and escape (the rule of pre-commit's `identify`, over the whole file). The
`.pre-commit-config.yaml` hooks run it with the hook environment's Python.
"""

import importlib
import sys
from collections.abc import Sequence

TEXT_BYTES = bytes(sorted({7, 8, 9, 10, 11, 12, 13, 27} | set(range(0x20, 0x100)) - {0x7F}))


def is_text(path: str) -> bool:
    with open(path, "rb") as handle:
        return not handle.read().translate(None, TEXT_BYTES)


def main(argv: Sequence[str]) -> int:
    module, *files = argv
    fixer = importlib.import_module(module).main
    text = [name for name in files if is_text(name)]
    return int(fixer(text)) if text else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
