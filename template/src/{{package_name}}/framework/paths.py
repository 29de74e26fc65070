# Managed by the template; local edits are merged on update.
"""Where the project lives on disk, so commands behave the same from any folder in it.

Relative paths in configs and on the command line (run roots, data folders) are taken
relative to the project root, not the working directory: `python -m <package> fit`
run from `src/` or `tests/` writes to the same `runs/` as from the root.
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = PROJECT_ROOT / "configs" / "default.yaml"


def project_path(path: str | Path) -> Path:
    """`path` itself when absolute, else the same path under the project root."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path
