"""Checks of the resolved run config against this machine and its environment (DR001-DR010).

Each reads the config as plain data, the way `fit` with the same flags would resolve it,
and never builds the model or the data. Device, processes and precision are `context.plan`:
on this machine Lightning's own resolution of the trainer settings (run/lightning_plan.py),
for a described one the resolver's prediction (run/hardware.py). DR005 and DR008 fail
exactly when Lightning or the Trainer guard would stop `fit`, naming the settings.
"""

import re

from ...platform.loader_rules import pins_memory, worker_ceiling
from ...run.hardware import PRECISION_FLAGS, Unrunnable
from .context import Context, init_args
from .registry import Result, check, failed, passed, warned

MIN_COMPILE_TORCH = (2, 4)  # in-place `module.compile()` and the callback's options


def _refused(refusals: list[Unrunnable]) -> Result:
    """The guard's refusals as one failed result: what `fit` would stop with."""
    return failed(
        "; ".join(f"{r.where}: {r.problem}" for r in refusals),
        " ".join(r.fix for r in refusals),
    )


@check("DR001", "seed-set")
def seed_set(context: Context) -> Result:
    seed = context.config.get("seed_everything")
    if isinstance(seed, bool) or seed is None:
        what = "picks a new random seed every run" if seed is not False else "seeds nothing"
        return failed(
            f"seed_everything: {seed} {what}, so no run can be repeated",
            "set an integer in configs/default.yaml (`seed_everything: 1234`) or pass "
            "`--seed_everything 1234`",
        )
    return passed(f"seed_everything: {seed} (torch, numpy, python and workers)")


@check("DR002", "deterministic-consistent")
def deterministic_consistent(context: Context) -> Result:
    trainer = context.trainer
    deterministic, benchmark = trainer.get("deterministic"), trainer.get("benchmark")
    if deterministic and benchmark:
        return failed(
            f"deterministic: {deterministic} with benchmark: true: cuDNN's benchmark mode picks "
            "kernels by timing and PyTorch then ignores the deterministic flag",
            "drop `trainer.benchmark` (Lightning turns it off under deterministic) or set it false",
        )
    autotuned = [
        e
        for e in context.callbacks_named("TorchCompile")
        if str(init_args(e).get("mode")).startswith("max-autotune")
    ]
    if deterministic and autotuned:
        return warned(
            "deterministic with compile mode max-autotune: autotuning picks kernels by timing",
            "use compile mode `default` for bit-exact runs",
        )
    if deterministic:
        return passed(f"deterministic: {deterministic}, benchmark off")
    return passed("not requested (configs/presets/deterministic.yaml turns it on)")


@check("DR003", "dataloader-workers")
def dataloader_workers(context: Context) -> Result:
    args = context.data_args
    if args is None or "num_workers" not in args:
        return warned(
            "the data module takes no `num_workers`: cannot tell how it loads",
            "give its __init__ a `num_workers` argument and pass it to every DataLoader",
        )
    workers = args["num_workers"]
    if workers is None or workers == "auto":
        return passed("num_workers: auto (sized to this machine when the loaders are built)")
    plan = context.plan
    processes = (plan.devices_per_node or 1) if plan.distributed else 1
    cpus = context.machine.cpus
    # A count below 0 never gets here: parsing the config refused it (bad_input.py), as
    # it refuses more workers than CPUs for one process. Here the workers of all the local
    # processes count: fit only warns about those (bad_input.check_num_workers), doctor
    # fails the check, as it does any setting to change before a long run.
    ceiling = worker_ceiling(int(workers), cpus, processes)
    if ceiling is not None:
        problem, fix = ceiling
        return failed(f"--data.num_workers {workers}: {problem}", fix)
    if workers == 0 and cpus >= 4:
        return warned(
            f"num_workers: 0 loads every batch in the training process ({cpus} cores idle)",
            "a few workers (`--data.init_args.num_workers 4`, or `auto`) if the device waits for data",
        )
    if (
        workers
        and context.machine.system in ("Windows", "Darwin")
        and args.get("persistent_workers") is False
    ):
        return warned(
            f"{context.machine.system} starts workers with spawn: without persistent_workers each "
            "epoch re-imports torch in every worker",
            "`--data.init_args.persistent_workers true`",
        )
    return passed(f"num_workers: {workers} for {cpus} cores")


@check("DR004", "pin-memory")
def pin_memory(context: Context) -> Result:
    args, kind = context.data_args or {}, context.plan.device
    if "pin_memory" not in args:
        if pins_memory(kind):
            return warned(
                "the data module takes no `pin_memory`: host-to-GPU copies may not be pinned",
                "give it a `pin_memory` argument passed to its DataLoaders (true on CUDA)",
            )
        return passed(f"not configurable; irrelevant on {kind}")
    pinned = args["pin_memory"]
    if not isinstance(pinned, bool):
        return passed(f"pin_memory: {pinned} (decided by the loaders)")
    if pinned == pins_memory(kind):
        return passed(f"pin_memory: {pinned} on {kind}")
    if not pinned:
        return failed(
            "pin_memory: false while training on CUDA: every batch is copied from pageable memory "
            "and the copy cannot overlap compute",
            "`--data.init_args.pin_memory true`",
        )
    return warned(
        f"pin_memory: true on {kind}: pinning only speeds up copies to a CUDA device",
        "`--data.init_args.pin_memory false` (or auto)",
    )


@check("DR005", "precision-supported")
def precision_supported(context: Context) -> Result:
    plan = context.plan
    refusals = [r for r in plan.refusals if r.flag in PRECISION_FLAGS]
    if refusals:
        return _refused(refusals)
    if plan.precision.startswith("transformer-engine") and (
        "transformer_engine" not in context.machine.modules
    ):
        return failed(
            f"precision {plan.precision} needs NVIDIA Transformer Engine, which is not installed",
            "`pip install transformer-engine` on a Hopper-class GPU, or use bf16-mixed",
        )
    if plan.cpu_fp16:
        return passed("16-mixed on cpu: real float16 autocast with a CPU GradScaler")
    return passed(f"{plan.precision} on {plan.device}")


@check("DR006", "amp-grad-scaler")
def amp_grad_scaler(context: Context) -> Result:
    precision = context.plan.precision
    scaler = init_args(context.plan.precision_plugin).get("scaler")
    if precision == "16-true":
        return failed(
            "precision 16-true trains weights and gradients in fp16 with no loss scaling: "
            "small gradients flush to zero and updates are lost",
            "`--trainer.precision 16-mixed` (fp32 weights + GradScaler) or bf16-mixed",
        )
    if scaler and not precision.startswith("16"):
        return failed(
            f"a GradScaler is configured for {precision}, which has no underflow to scale "
            "away: Lightning refuses it",
            "remove the plugin's `scaler`",
        )
    if (
        precision == "16-mixed"
        and isinstance(scaler, dict)
        and init_args(scaler).get("enabled") is False
    ):
        return failed(
            "fp16 with a disabled GradScaler: small gradients underflow to zero",
            "remove `enabled: false` from the scaler (or the scaler: Lightning makes one)",
        )
    if precision == "16-mixed":
        return passed("fp16 with a GradScaler; Trainer gradient clipping unscales first")
    return passed(f"{precision} needs no loss scaling")


def _version(text: str) -> tuple[int, int]:
    major, minor = (int(part) for part in re.findall(r"\d+", text)[:2])
    return major, minor


@check("DR007", "compile-config")
def compile_config(context: Context) -> Result:
    entries = context.callbacks_named("TorchCompile")
    if not entries:
        return passed("not configured: the model runs eagerly")
    machine, args = context.machine, init_args(entries[0])
    mode, backend = args.get("mode"), args.get("backend") or "inductor"
    if _version(machine.torch_version) < MIN_COMPILE_TORCH:
        return failed(
            f"torch {machine.torch_version} is older than the "
            f"{'.'.join(map(str, MIN_COMPILE_TORCH))} the compile callback needs",
            "upgrade torch, or drop the compile preset",
        )
    if machine.dynamo_supported is False:
        return failed(
            f"torch.compile does not support this Python (torch {machine.torch_version})",
            "use a Python version this torch supports for compile, or drop the compile preset",
        )
    if mode is not None and machine.compile_modes is not None and mode not in machine.compile_modes:
        return failed(
            f"compile mode {mode!r} is unknown to torch {machine.torch_version}",
            f"use one of: {', '.join(sorted(machine.compile_modes))}",
        )
    kind = context.plan.device
    if backend == "inductor" and kind == "cpu" and machine.cxx is None:
        detail = "inductor on CPU compiles C++, and no C++ compiler was found"
        fix = "install g++ (Linux), Xcode tools (macOS) or MSVC (Windows), or set $CXX"
        return warned(detail, fix) if args.get("fallback_to_eager") else failed(detail, fix)
    if mode in ("reduce-overhead", "max-autotune") and kind != "cuda":
        return warned(
            f"mode {mode} relies on CUDA graphs, which do nothing on {kind}",
            "use mode `default` off CUDA",
        )
    return passed(
        f"mode {mode or 'default'}, backend {backend}, torch {machine.torch_version}; "
        "whether your model compiles: `doctor --try`"
    )


@check("DR008", "ddp-devices")
def ddp_devices(context: Context) -> Result:
    plan, strategy = context.plan, context.trainer.get("strategy")
    refusals = [r for r in plan.refusals if r.flag not in PRECISION_FLAGS]
    if refusals:
        return _refused(refusals)
    if not plan.distributed:
        return passed(f"single process on {plan.device}")
    processes = (plan.devices_per_node or 1) * plan.num_nodes
    if processes == 1:
        if isinstance(strategy, dict):  # a class with its arguments: its name says enough
            strategy = str(strategy.get("class_path", "?")).rsplit(".", 1)[-1]
        return warned(
            f"strategy {strategy} with one process: DDP's overhead, no speed-up",
            "`--trainer.devices N` with N > 1, or drop the ddp preset",
        )
    if context.trainer.get("use_distributed_sampler") is False:
        return warned(
            "use_distributed_sampler: false: every rank reads the whole dataset unless your "
            "loaders shard it and call DistributedSampler.set_epoch each epoch",
            "remove `use_distributed_sampler: false` (Lightning adds the sampler and set_epoch)",
        )
    if plan.device == "cpu" and processes > context.machine.cpus:
        return warned(
            f"{processes} CPU processes on {context.machine.cpus} cores",
            f"`--trainer.devices {context.machine.cpus}` or fewer",
        )
    return passed(f"{processes} processes ({plan.devices_per_node} per node) on {plan.device}")


@check("DR009", "multinode-env")
def multinode_env(context: Context) -> Result:
    env, nodes, per_node = context.env, context.plan.num_nodes, context.plan.devices_per_node
    # Lightning ignores SLURM's variables in an interactive allocation (`srun --pty bash`).
    slurm = "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")
    if slurm:
        slurm_nodes, tasks = int(env.get("SLURM_NNODES", "1")), int(env["SLURM_NTASKS"])
        if slurm_nodes != nodes:
            return failed(
                f"SLURM allocated {slurm_nodes} node(s) but trainer.num_nodes is {nodes}",
                f"`--trainer.num_nodes {slurm_nodes}` or `#SBATCH --nodes={nodes}`",
            )
        if per_node and tasks != nodes * per_node:
            return failed(
                f"SLURM runs {tasks} task(s) but the trainer expects {nodes} x {per_node} "
                "(num_nodes x devices): ranks would wait for each other forever",
                f"`#SBATCH --ntasks-per-node={per_node}` (one task per device)",
            )
        return passed(f"SLURM: {slurm_nodes} node(s), {tasks} task(s)")
    if "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not env.get(name)]
        node_rank = int(env.get("NODE_RANK") or env.get("GROUP_RANK") or 0)
        if world > 1 and missing:
            return failed(
                f"WORLD_SIZE={world} but {' and '.join(missing)} unset: ranks cannot meet",
                "launch with torchrun (scripts/torchrun.sh), which sets them",
            )
        if per_node and world != nodes * per_node:
            return failed(
                f"WORLD_SIZE={world} but the trainer expects {nodes} x {per_node} (num_nodes x devices)",
                "make torchrun's --nnodes x --nproc-per-node match num_nodes x devices",
            )
        if node_rank >= nodes:
            return failed(
                f"node rank {node_rank} with num_nodes {nodes}",
                "give torchrun a --node-rank below --nnodes",
            )
        return passed(f"torchrun: WORLD_SIZE={world}, node rank {node_rank}")
    if nodes > 1:
        return failed(
            f"num_nodes: {nodes} but no launcher set this process up (no SLURM_NTASKS, no "
            "WORLD_SIZE): the run would wait for nodes that never come",
            "submit with `sbatch scripts/slurm.sbatch`, or start it with torchrun on every node",
        )
    return passed("single node")


@check("DR010", "checkpoint-provenance")
def checkpoint_provenance(context: Context) -> Result:
    if context.trainer.get("enable_checkpointing") is False:
        return warned(
            "checkpointing is off: this run keeps no weights", "drop enable_checkpointing: false"
        )
    if context.callbacks_named("CheckpointProvenance"):
        return passed("checkpoints record the git commit, torch version and config")
    if context.provenance_class is None:
        return warned(
            "this project has no checkpoint provenance callback: checkpoints will not say which "
            "commit or torch version made them",
            "`copier update` to a template version that ships it",
        )
    return failed(
        "no CheckpointProvenance callback: checkpoints will not record the git commit, "
        "torch version and config that made them",
        f"add `- class_path: {context.provenance_class}` to trainer.callbacks in "
        "configs/default.yaml (a preset appends with `callbacks+:`)",
    )
