"""How `fit`, `validate`, `test` and `predict` run, from the command line to a Trainer.

Start at lightning_cli.py (`ProjectCLI`, LightningCLI with the project's defaults): it parses
the config (resolve.py parses without running), refuses bad values, picks the run folder
(run_folders.py, run_root.py), reads what `--ckpt_path` names (checkpoint_hparams.py),
records the run (run_record.py; a command that stops before its first batch leaves the
folder as it found it: failed_start.py), and builds the Trainer with the hardware plan
(hardware.py, precision.py; doctor asks Lightning the same way: lightning_plan.py) and the
loggers (loggers.py). It may import the rooms below it (callbacks, checkpoints, platform),
never the tools above it.
"""
