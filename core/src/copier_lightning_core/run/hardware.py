"""Where and how a run would train on a machine described as data; what stops a run, for all.

`fit` does not resolve its settings here: Lightning's accelerator connector does, when the
Trainer is built, and refuses what it knows cannot work; precision.py then checks the
Trainer it built with `unrunnable_after_lightning`, the rules Lightning does not apply.
doctor on this machine asks Lightning the same way (lightning_plan.py).

Only a machine that is not this one cannot be asked: `resolve` answers for hardware
described as data (a 4-GPU node, asked on a laptop: doctor's checks are tested that way)
and predicts, from the settings and a `Hardware`, what the connector will choose and
refuse, then applies the same `unrunnable_after_lightning` to its prediction. The
library's tests/test_resolver.py holds the prediction to Lightning: for every shipped
preset and pair, it passes exactly when Lightning builds the Trainer and the guard lets
it start, on the machine that runs the test.

The settings come either as the parser's plain data (`class_path` / `init_args` dicts,
doctor) or as the objects built from them (fit); both read the same here.

Importing this module does not import torch: doctor's static mode runs on every commit.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRECISION_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true"}
ACCELERATOR_CLASSES = {"CPUAccelerator": "cpu", "CUDAAccelerator": "cuda", "MPSAccelerator": "mps"}
DISTRIBUTED_PREFIXES = ("ddp", "fsdp", "deepspeed", "model_parallel")
DISTRIBUTED_CLASSES = (
    "DDPStrategy",
    "FSDPStrategy",
    "DeepSpeedStrategy",
    "ModelParallelStrategy",
    "FSDP2Strategy",  # callbacks/sharding.py, a ModelParallelStrategy (doctor sees its name)
)
MODEL_PARALLEL_CLASSES = ("ModelParallelStrategy", "FSDP2Strategy")  # FSDP2: CUDA or CPU
PRECISION_FLAGS = ("precision", "plugins")  # the refusals doctor reports under DR005


@dataclass(frozen=True)
class Hardware:
    """The facts about a machine that decide where and in what precision a run trains."""

    cuda_devices: int
    cuda_bf16: bool  # every visible CUDA device computes in bfloat16
    mps: bool


def probe() -> Hardware:
    """This machine's `Hardware`, as torch sees it now (CUDA_VISIBLE_DEVICES included)."""
    import torch

    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Hardware(
        cuda_devices=cuda,
        cuda_bf16=cuda > 0 and torch.cuda.is_bf16_supported(),
        mps=torch.backends.mps.is_available(),
    )


@dataclass(frozen=True)
class Unrunnable:
    """A setting this machine cannot run: the flag, what is wrong, and what to pass instead."""

    flag: str  # the trainer key at fault, e.g. "precision"; of several, the first
    value: str
    problem: str
    fix: str
    given: str | None = None  # several settings at fault, as flags (Lightning's refusal)

    @property
    def where(self) -> str:
        """The setting as a flag: `--trainer.precision bf16-mixed`."""
        return self.given or f"--trainer.{self.flag} {self.value}"

    @property
    def message(self) -> str:
        """The paragraph the guard refuses the setting with."""
        return f"{self.where}: {self.problem}. {self.fix}"


@dataclass(frozen=True)
class Plan:
    """How Lightning will run these settings on this hardware, or why it must not start."""

    device: str  # "cpu", "cuda", "mps"; "gpu" when none is visible; else the flag as given
    devices_per_node: int | None  # processes Lightning starts per node; None: cannot tell
    num_nodes: int
    distributed: bool
    precision: str  # what the run trains in, in Lightning's long form ("16-mixed")
    precision_plugin: Any  # the trainer.plugins entry that sets precision, or None
    cpu_fp16: bool  # 16-mixed on CPU: the guard sets MixedPrecision(device="cpu") + GradScaler
    refusals: tuple[Unrunnable, ...]  # empty when the run may start


def resolve(trainer: Mapping[str, Any], hardware: Hardware) -> Plan:
    """The `Plan` for `trainer` (accelerator, devices, strategy, precision, plugins, ...) on
    described `hardware`; on this machine Lightning answers (lightning_plan.built_plan)."""
    device = _device(trainer.get("accelerator"), hardware)
    available = {"cuda": hardware.cuda_devices, "mps": int(hardware.mps), "gpu": 0}.get(device)
    devices = trainer.get("devices")
    devices = "auto" if devices is None else devices
    per_node = _devices_per_node(devices, available)
    nodes = int(trainer.get("num_nodes") or 1)
    strategy = _names(trainer.get("strategy") or "auto")
    distributed = any(
        name in DISTRIBUTED_CLASSES or name.startswith(DISTRIBUTED_PREFIXES) for name in strategy
    ) or ("auto" in strategy and ((per_node or 1) > 1 or nodes > 1))
    plugin = next((p for p in _as_list(trainer.get("plugins")) if _is_precision_plugin(p)), None)
    flag = trainer.get("precision")
    flag = None if flag is None else PRECISION_ALIASES.get(str(flag), str(flag))
    if plugin is not None:
        precision = str(_argument(plugin, "precision") or "32-true")
    else:
        precision = flag or "32-true"
    both = _flag_and_plugin(flag, plugin)
    after = unrunnable_after_lightning(
        device, precision, plugin, bool(trainer.get("sync_batchnorm")), hardware.cuda_bf16
    )
    refusals = [
        *_device_refusals(device, devices, per_node, available, strategy, trainer),
        *both,  # Lightning stops at the pair before it looks at the precision itself
        *[refusal for refusal in after if not both or refusal.flag not in PRECISION_FLAGS],
        *_model_parallel_refusals(strategy, precision),
    ]
    return Plan(
        device=device,
        devices_per_node=per_node,
        num_nodes=nodes,
        distributed=distributed,
        precision=precision,
        precision_plugin=plugin,
        # Lightning would silently train in bf16-mixed instead (a warning, no GradScaler).
        cpu_fp16=plugin is None and precision == "16-mixed" and device == "cpu",
        refusals=tuple(refusals),
    )


def device_kind(accelerator: Any) -> str:
    """The kind of an accelerator Lightning built ("cpu", "cuda", "mps"), else its class name."""
    names = _names(accelerator)
    return next((ACCELERATOR_CLASSES[n] for n in names if n in ACCELERATOR_CLASSES), names[0])


def unrunnable_after_lightning(
    device: str, precision: str, plugin: Any, sync_batchnorm: bool, cuda_bf16: bool
) -> list[Unrunnable]:
    """What Lightning builds a Trainer for without a word, but `device` cannot run.

    `precision` in Lightning's long form ("bf16-mixed"), `plugin` the precision plugin the
    config names (None: Lightning's own from the flag). fit and doctor on this machine
    pass what Lightning built; doctor for a described machine what `resolve` predicts.
    """
    found = []
    if sync_batchnorm and device in ("cpu", "mps"):
        found.append(
            Unrunnable(
                "sync_batchnorm",
                "true",
                f"torch's SyncBatchNorm runs on CUDA GPUs only, and this run is on {device!r}",
                "Set it to false here (configs/presets/ddp.yaml); off CUDA each process keeps "
                "its own BatchNorm statistics.",
            )
        )
    key, value = ("plugins", _names(plugin)[0]) if plugin is not None else ("precision", precision)
    plugin_device = str(_argument(plugin, "device") or device)
    if plugin is not None and plugin_device != device and device != "gpu":
        found.append(
            Unrunnable(
                "plugins",
                value,
                f"the precision plugin runs on device {plugin_device!r}, and training on {device!r}",
                f"Set the plugin's `device: {device}`, or choose the matching accelerator.",
            )
        )
    elif precision.startswith("bf16") and device == "cuda" and not cuda_bf16:
        found.append(
            Unrunnable(
                key,
                value,
                "this GPU has no bfloat16 support (pre-Ampere: torch.cuda.is_bf16_supported() "
                "is False)",
                "Use configs/presets/fp16.yaml instead (--trainer.precision 16-mixed, float16 "
                "with a GradScaler), or 32-true.",
            )
        )
    elif precision.startswith("64") and device == "mps":
        found.append(
            Unrunnable(key, value, "Apple GPUs (MPS) have no float64", "Use 32-true, or CPU.")
        )
    return found


def _device(flag: Any, hardware: Hardware) -> str:
    names = _names(flag or "auto")
    name = next((ACCELERATOR_CLASSES[n] for n in names if n in ACCELERATOR_CLASSES), names[0])
    if name in ("auto", "gpu"):
        if hardware.cuda_devices:
            return "cuda"
        if hardware.mps:
            return "mps"
        return "cpu" if name == "auto" else "gpu"
    return name


def _devices_per_node(devices: Any, available: int | None) -> int | None:
    if isinstance(devices, list | tuple):
        return len(devices)
    text = str(devices).strip()
    if text in ("auto", "-1"):
        return 1 if available is None else available
    if "," in text:
        return len(_device_ids(text))
    return int(text) if text.lstrip("-").isdigit() else None


def _device_ids(devices: Any) -> list[int]:
    """The device indices a list or a "0,1" string names; [] for a count or auto."""
    if isinstance(devices, list | tuple):
        return [int(i) for i in devices]
    text = str(devices)
    return [int(part) for part in text.split(",") if part.strip()] if "," in text else []


def _device_refusals(
    device: str,
    devices: Any,
    per_node: int | None,
    available: int | None,
    strategy: tuple[str, ...],
    trainer: Mapping[str, Any],
) -> list[Unrunnable]:
    """What Lightning's connector refuses when it builds the Trainer (predicted)."""
    found = []
    if available == 0:
        found.append(
            Unrunnable(
                "accelerator",
                _names(trainer.get("accelerator"))[0],
                f"no {'GPU' if device == 'gpu' else device.upper()} is visible here "
                "(torch.cuda.is_available() is False, and no MPS)",
                "Use --trainer.accelerator cpu, or auto to take a GPU when there is one; on a "
                "GPU node check the CUDA build of torch and CUDA_VISIBLE_DEVICES.",
            )
        )
    text = str(devices).strip()
    count = int(text) if text.lstrip("-").isdigit() else None
    if device == "cpu" and text != "auto" and not (count and count > 0):
        found.append(
            Unrunnable(
                "devices",
                text,
                "not a number of CPU processes (on CPU, devices counts processes: no ids, no -1)",
                "Give a count > 0 or auto (one process), e.g. --trainer.devices 2 for two "
                "processes with configs/presets/ddp.yaml.",
            )
        )
    elif count is not None and (count == 0 or count < -1):
        found.append(
            Unrunnable(
                "devices",
                text,
                f"not a number of {device} devices",
                "Give a count > 0, a list of device ids, -1 (all) or auto, e.g. "
                "--trainer.devices 2 for two processes.",
            )
        )
    elif available and (
        (per_node or 0) > available or any(i >= available for i in _device_ids(devices))
    ):
        found.append(
            Unrunnable(
                "devices",
                text,
                f"this machine has {available} {device} device(s)",
                f"Use --trainer.devices {available} (or auto: all of them).",
            )
        )
    # FSDP1 (FSDPStrategy, "fsdp*"): CUDA only. FSDP2 (fsdp2.yaml) also runs on CPU (gloo).
    fsdp = any(name == "FSDPStrategy" or name.startswith("fsdp") for name in strategy)
    if fsdp and device not in ("cuda", "gpu"):  # "gpu": refused above, no GPU at all
        found.append(
            Unrunnable(
                "strategy",
                strategy[0],
                "FSDP1 (Lightning's FSDPStrategy) shards a model across CUDA GPUs only, and this "
                f"run is on {device!r}",
                "Use configs/presets/fsdp2.yaml instead (FSDP2: runs on GPUs and on CPU, e.g. "
                "--trainer.accelerator cpu --trainer.devices 2), or configs/presets/ddp.yaml.",
            )
        )
    return found


def _flag_and_plugin(flag: str | None, plugin: Any) -> list[Unrunnable]:
    """Lightning refuses a precision flag next to a precision plugin (predicted)."""
    if plugin is None or flag is None:
        return []
    return [
        Unrunnable(
            "precision",
            flag,
            f"a precision plugin ({_names(plugin)[0]}) is set in trainer.plugins too, and "
            "Lightning refuses both",
            "Keep one: drop --trainer.precision when a preset adds a precision plugin.",
        )
    ]


def _model_parallel_refusals(strategy: tuple[str, ...], precision: str) -> list[Unrunnable]:
    """ModelParallelStrategy (FSDP2) takes no float16 with a GradScaler, and no float64: Lightning
    refuses the rest when it builds the Trainer (predicted)."""
    supported = ("32-true", "bf16-mixed", "bf16-true", "16-true")
    if not any(name in MODEL_PARALLEL_CLASSES for name in strategy) or precision in supported:
        return []
    return [
        Unrunnable(
            "precision",
            precision,
            "FSDP2 (Lightning's ModelParallelStrategy) trains only in "
            f"{', '.join(supported)}: Lightning refuses the rest",
            "Stack configs/presets/bf16.yaml instead of fp16.yaml (bfloat16 needs no "
            "GradScaler), or use 32-true.",
        )
    ]


def _names(value: Any) -> tuple[str, ...]:
    """A setting as names to match: ("ddp",) for a string, the class and its bases otherwise."""
    if isinstance(value, str):
        return (value.lower(),)
    if isinstance(value, Mapping) and "class_path" in value:
        return (str(value["class_path"]).rsplit(".", 1)[-1],)
    return tuple(cls.__name__ for cls in type(value).__mro__)


def _is_precision_plugin(entry: Any) -> bool:
    """Lightning's precision plugins are all called `*Precision` (MixedPrecision, ...)."""
    return any(name.endswith("Precision") for name in _names(entry))


def _argument(entry: Any, name: str) -> Any:
    """An init argument of a class_path entry, or the attribute of the object built from it."""
    if entry is None:
        return None
    if isinstance(entry, Mapping):
        return (entry.get("init_args") or {}).get(name)
    return getattr(entry, name, None)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
