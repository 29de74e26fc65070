# Managed by the template; local edits are merged on update.
"""What the trainer settings mean on this machine, the way Lightning will read them.

Lightning resolves `accelerator`, `devices`, `strategy` and `precision` only when it builds a
Trainer; the checks need the same answers from the config alone, without building anything.
"""

from .context import Context, class_of, init_args

DISTRIBUTED_PREFIXES = ("ddp", "fsdp", "deepspeed", "model_parallel")
DISTRIBUTED_CLASSES = ("DDPStrategy", "FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy")
PRECISION_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}


def accelerator(context: Context) -> str:
    """`cpu`, `cuda`, `mps`, or the flag as given (tpu, a class path...)."""
    flag = context.trainer.get("accelerator") or "auto"
    if not isinstance(flag, str):
        return "custom"
    machine = context.machine
    if flag in ("auto", "gpu"):
        if machine.cuda_devices:
            return "cuda"
        if machine.mps:
            return "mps"
        return "cpu" if flag == "auto" else "gpu"
    return flag


def available_devices(context: Context) -> int | None:
    """Devices of the chosen accelerator on this machine; None where there is no fixed limit."""
    kind = accelerator(context)
    if kind == "cuda":
        return context.machine.cuda_devices
    if kind == "mps":
        return int(context.machine.mps)
    if kind == "gpu":
        return 0
    return None


def devices_per_node(context: Context) -> int | None:
    """How many processes Lightning starts on this node; None when it cannot be told."""
    devices = context.trainer.get("devices", "auto")
    if isinstance(devices, list):
        return len(devices)
    text = str(devices).strip()
    if text in ("auto", "-1"):
        available = available_devices(context)
        return 1 if available is None else available
    if "," in text:
        return len([part for part in text.split(",") if part.strip()])
    return int(text) if text.lstrip("-").isdigit() else None


def num_nodes(context: Context) -> int:
    return int(context.trainer.get("num_nodes") or 1)


def is_distributed(context: Context) -> bool:
    strategy = context.trainer.get("strategy") or "auto"
    if isinstance(strategy, dict) and "class_path" in strategy:
        return class_of(strategy) in DISTRIBUTED_CLASSES
    if str(strategy).startswith(DISTRIBUTED_PREFIXES):
        return True
    return str(strategy) == "auto" and (
        (devices_per_node(context) or 1) > 1 or num_nodes(context) > 1
    )


def precision_plugin(context: Context) -> dict | None:
    """The `trainer.plugins` entry that sets precision (Lightning's `*Precision` classes)."""
    return next((e for e in context.entries("plugins") if class_of(e).endswith("Precision")), None)


def precision_flag(context: Context) -> str | None:
    """`trainer.precision` in Lightning's long form ("16" -> "16-mixed"); None when unset."""
    value = context.trainer.get("precision")
    return None if value is None else PRECISION_ALIASES.get(str(value), str(value))


def effective_precision(context: Context) -> str:
    """The precision Lightning will train in, including its silent fp16 -> bf16 swap on CPU."""
    plugin = precision_plugin(context)
    if plugin is not None:
        return str(init_args(plugin).get("precision") or "32-true")
    value = precision_flag(context) or "32-true"
    if value == "16-mixed" and accelerator(context) == "cpu":
        return "bf16-mixed"
    return value
