"""The commands besides the Trainer's: doctor, sweep, tune, compare, export and more.

`doctor`, `sweep`, `tune`, `compare`, `export`, `inspect-ckpt` and `verify-determinism`,
one folder or file each. A tool builds on the rooms below it (a sweep's trials are
ordinary `fit` runs through run/, `doctor` parses the config through run/resolve.py);
nothing below imports a tool. cli.py, above every room, names them.
"""
