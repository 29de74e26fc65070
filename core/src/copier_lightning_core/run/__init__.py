"""How `fit`, `validate`, `test` and `predict` run, from the command line to a Trainer.

Start at lightning_cli.py (`ProjectCLI`, LightningCLI with the project's defaults): it parses
the config (resolve.py parses without running), refuses bad values, and makes the run plan
in one function (run_plan.py): the run folder (run_folders.py, run_root.py), what
`--ckpt_path` names (ckpt_path.py) and its hyperparameters (checkpoint_hparams.py), the
lock, the loggers a resumed fit continues; the plan then claims and records the run
(run_record.py; a command that stops before its first batch leaves the folder as it found
it: failed_start.py), and the CLI builds the Trainer with the hardware plan
(hardware.py, precision.py; doctor asks Lightning the same way: lightning_plan.py) and the
loggers (loggers.py). It may import the rooms below it (callbacks, checkpoints, platform),
never the tools above it.
"""
