# Managed by the template; local edits are merged on update.
"""`python -m <package> ...`: the project's command line, run by copier-lightning-core.

The `__main__` guard matters: DDP and DataLoader workers started with the "spawn" method
(the default on Windows and macOS) re-import this module, and must not re-run the CLI.
"""

from copier_lightning_core.cli import main

if __name__ == "__main__":
    # A tool's exit status (doctor: 1 on a failed check) is the shell's.
    raise SystemExit(main(project=__package__))
