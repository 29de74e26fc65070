"""Checkpoint files: read, written atomically, checked, merged from shards.

The one loader every command reads them through (load.py), atomic saves
(checkpoint_io.py), the JSON summary saved beside each for `compare` (summary.py), where a
checkpoint came from (provenance.py), which classes one may name (trusted_classes.py),
frozen weights left out and put back (left_out.py), sharded folders merged into one file
(consolidate.py), and the pre-commit hook that keeps weights out of git (weight_files.py).
It may import platform only.
"""
