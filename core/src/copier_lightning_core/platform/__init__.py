"""What every room stands on: refusals, paths, loaders, signals, private APIs.

The one error a command refuses with (refusal.py), where the project lives on disk
(project.py, paths.py), bounded YAML (yaml_guard.py), loader settings, their rules and
checks (loaders.py, loader_rules.py, bad_input.py), signals and worker processes
(signals.py, worker_signals.py; how workers start on a Python whose forks can hang:
worker_start.py, forkserver_preload.py), old class paths still read (old_paths.py), and
the private torch and Lightning APIs the library relies on, in one file, each pinned by
a test (private_apis.py). It imports no other room.
"""
