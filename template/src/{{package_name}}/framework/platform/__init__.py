# Managed by the template; local edits are merged on update.
"""What every room stands on: refusals, paths, loaders, signals, private APIs.

The one error a command refuses with (refusal.py), where the project lives on disk
(paths.py), bounded YAML (yaml_guard.py), loader settings and their checks (loaders.py,
bad_input.py), signals and worker processes (signals.py), old module paths kept importable
(moved_modules.py), and the private torch and Lightning APIs the framework relies on, in
one file, each pinned by a test (private_apis.py). It imports no other room.
"""
