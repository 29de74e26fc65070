"""`doctor`: the checks behind CHECKLIST.md, each with a stable ID (DR001, DR002, ...).

Importing this package stays cheap (no torch): pre-commit runs its static mode on every commit.
"""

from .command import main
from .registry import CHECKS

__all__ = ["CHECKS", "main"]
