"""Class paths of older releases, read as the classes that replaced them.

Class paths are written into files the library does not own: each run's recorded config
(config.yaml), a checkpoint's hyperparameters and provenance, experiment files and sweep
specs. Until v0.2.0 the template copied the library into each project as
`<package>.framework` (first flat, `framework.health`, then in rooms,
`framework.callbacks.health`); `copier update` rewrites the paths in the project's own
configs, and this keeps the checkpoints of old runs loadable (their hyperparameters and
callbacks, read through checkpoints/trusted_classes.py):
`<package>.framework.health.NonFiniteGuard` is read as
`copier_lightning_core.callbacks.health.NonFiniteGuard`, the same class, so `isinstance`
checks and recorded classes agree.
"""

LIBRARY = __package__.split(".")[0]
FRAMEWORK = "framework"  # the copied library's folder in a project, until v0.2.0

# module, relative to `<package>.framework`, as v0.2.0's main branch had it -> its room here
MOVED = {
    "bad_input": "platform.bad_input",
    "checkpoint_hparams": "run.checkpoint_hparams",
    "checkpoint_io": "checkpoints.checkpoint_io",
    "compare": "tools.compare",
    "compile": "callbacks.compile",
    "consolidate": "checkpoints.consolidate",
    "determinism": "tools.determinism",
    "doctor": "tools.doctor",
    "export": "tools.export",
    "finetune": "callbacks.finetune",
    "hardware": "run.hardware",
    "health": "callbacks.health",
    "inspect_ckpt": "tools.inspect_ckpt",
    "lightning_cli": "run.lightning_cli",
    "loader_hooks": "callbacks.loader_hooks",
    "loaders": "platform.loaders",
    "log_steps": "callbacks.log_steps",
    "loggers": "run.loggers",
    "lr_scaling": "callbacks.lr_scaling",
    "monitor": "callbacks.monitor",
    "no_profiler": "callbacks.no_profiler",
    "paths": "platform.paths",
    "precision": "run.precision",
    "prediction_table": "callbacks.prediction_table",
    "predictions": "callbacks.predictions",
    "private_apis": "platform.private_apis",
    "progress": "callbacks.progress",
    "provenance": "checkpoints.provenance",
    "refusal": "platform.refusal",
    "resume": "callbacks.resume",
    "run_folders": "run.run_folders",
    "run_length": "run.run_length",
    "run_record": "run.run_record",
    "run_root": "run.run_root",
    "sharding": "callbacks.sharding",
    "signals": "platform.signals",
    "sweep": "tools.sweep",
    "throughput": "callbacks.throughput",
    "trusted_classes": "checkpoints.trusted_classes",
    "tune": "tools.tune",
    "weight_files": "checkpoints.weight_files",
    "yaml_guard": "platform.yaml_guard",
}


def current_path(class_path: str) -> str:
    """The path that names today what `class_path` named when it was written.

    `<package>.framework.<module>.<rest>` (a room's module, or its older flat name in
    `MOVED`) becomes `copier_lightning_core.<room>.<module>.<rest>`; any other path is
    returned as it is.
    """
    parts = class_path.split(".")
    if len(parts) < 3 or parts[1] != FRAMEWORK:
        return class_path
    head, rest = parts[2], parts[3:]
    room = MOVED.get(head, head)
    return ".".join([LIBRARY, *room.split("."), *rest])
