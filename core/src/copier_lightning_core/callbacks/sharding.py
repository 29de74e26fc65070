"""FSDP2 for any LightningModule: `fully_shard` per block, chosen in the config, not the code.

Lightning's `ModelParallelStrategy` runs FSDP2 (`torch.distributed.fsdp.fully_shard`), but
it leaves two things to the LightningModule: it refuses to start unless the module overrides
`configure_model` and applies the sharding there, and its default device mesh is
`num_nodes` x `devices` (tensor parallel within a node), so a pure data-parallel FSDP run
must name its device count. `FSDP2Strategy` does both from the preset: the mesh is one
data-parallel dimension over all processes, and the module's `configure_model` (its own, if
it has one, runs first) is followed by `fully_shard` on each block and then on the root.

A module that shards itself in `configure_model` is left as it is: the blocks are only
sharded when nothing is sharded yet, which also keeps the hook idempotent (fit, then test).

Runs on CUDA (NCCL) and on CPU (gloo), where it is tested with two processes.
"""

from collections.abc import Callable

import lightning as L
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard

from ..platform.refusal import Refusal


class FSDP2Strategy(ModelParallelStrategy):
    """Fully shards parameters, gradients and optimizer states across every process.

    Args:
        blocks: class names (`TransformerEncoderLayer`) or dotted paths
            (`torch.nn.TransformerEncoderLayer`) of the submodules that become shard units:
            one all-gather each before its forward and backward (a ModuleList or ModuleDict
            named here stands for its members). Empty (the default): read from the module
            itself, the members of its outermost ModuleLists / ModuleDicts (the repeated
            layers: transformer blocks, ResNet stages) and its `nn.Embedding`s; in a model
            without such containers, the parameter-holding children of the first module,
            from the root down, that has more than one (for a module wrapping one injected
            `net`, the net's layers). Either way, each network the module holds (`self.net`,
            `self.model`) is a unit too, so a step may call it directly, and weights tied
            across units (GPT-2's input and output embedding) stay in the root unit with
            whatever no unit holds.
        reshard_after_forward: free each block's gathered parameters after its forward
            (gathered again for backward): less memory, one more all-gather per block.
        save_distributed_checkpoint: each rank saves its shard into a checkpoint folder
            (fast; load it into a single process after `consolidate-ckpt FOLDER`). False:
            rank 0 gathers everything and writes one ordinary file (needs the full model
            in its CPU memory).
        process_group_backend: None picks NCCL on GPUs, gloo on CPU.
    """

    def __init__(
        self,
        blocks: list[str] | None = None,
        reshard_after_forward: bool = True,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
    ) -> None:
        super().__init__(
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
        )
        self.blocks = list(blocks or [])
        self.reshard_after_forward = reshard_after_forward

    def setup_environment(self) -> None:
        # One data-parallel dimension over all processes (the parent's "auto" is num_nodes).
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()
        module = self.lightning_module
        assert module is not None  # Lightning connects the module before the environment
        # An instance attribute over the class's hook, removed again at teardown.
        module.configure_model = _then_shard(  # type: ignore[method-assign]
            module.configure_model, module, self._shard
        )

    def teardown(self) -> None:
        module = self.lightning_module
        if module is not None and "configure_model" in vars(module):
            del module.configure_model  # the class's own hook again
        super().teardown()

    def _shard(self, module: L.LightningModule) -> None:
        if any(isinstance(m, FSDPModule) for m in module.modules()):
            return  # sharded by the module itself, or by an earlier stage of this run
        mesh = self.device_mesh["data_parallel"]
        try:
            units = with_networks(module, find_blocks(module, self.blocks))
        except ValueError as error:  # a preset naming no class the module has
            # Said once, not per rank: the other ranks end with status 1 and no message.
            raise Refusal(str(error)) if self.is_global_zero else SystemExit(1) from None
        # Innermost first: fully_shard on a parent skips parameters its children hold.
        for block in reversed(units):
            fully_shard(block, mesh=mesh, reshard_after_forward=self.reshard_after_forward)
        fully_shard(module, mesh=mesh, reshard_after_forward=self.reshard_after_forward)


def _then_shard(
    own: Callable[[], None],
    module: L.LightningModule,
    shard: Callable[[L.LightningModule], None],
) -> Callable[[], None]:
    """The module's own `configure_model`, then the sharding.

    Installed as an instance attribute: Lightning calls it as the module's hook, and its
    check that the hook is overridden (it compares code objects) then holds for any module.
    """

    def configure_model() -> None:
        own()
        shard(module)

    return configure_model


def find_blocks(module: nn.Module, blocks: list[str]) -> list[nn.Module]:
    """The shard units under `module`: the submodules named by class in `blocks`, else the
    default units (see FSDP2Strategy).

    `fully_shard` refuses two things a plain choice would hand it: a container without
    `forward` (ModuleList, ModuleDict), which stands for its members here, and a parameter
    split between two units (weights tied between modules), so a unit holding a parameter
    that a module outside it holds too is left to the root unit. The units come in
    `module.modules()` order (parents before children): sharded in reverse, innermost first.
    """
    found = _named_units(module, blocks) if blocks else _default_units(module)
    chosen = list({id(m): m for m in found}.values())  # a module named twice is one unit
    tied = _tied_outside(module, chosen)
    if blocks and tied:
        rank_zero_warn(
            f"FSDP2Strategy(blocks={blocks}): {_listed(module, tied)} share weights with "
            "modules outside them (tied weights), which one shard unit must hold together: "
            "they stay in the root unit. Name a class that holds both ends of the tie, or "
            "leave `blocks:` empty for the default units."
        )
    order = {id(m): index for index, m in enumerate(module.modules())}
    return sorted((m for m in chosen if m not in tied), key=lambda m: order[id(m)])


def with_networks(module: nn.Module, units: list[nn.Module]) -> list[nn.Module]:
    """`units`, and the module's own parameter-holding children that are not units yet.

    A LightningModule's steps may call its network directly (`self.model(**batch)`, as
    with a Hugging Face model) rather than `self(...)`. The root unit gathers the
    parameters left to it only in the module's own forward, so those the blocks do not
    hold (a LayerNorm beside the embeddings, a head) stayed sharded in such a step:
    "got mixed torch.Tensor and DTensor". Each network the module holds is a unit of its
    own, gathered whenever it runs, whoever calls it (unless weights tie it to another).
    """
    chosen = {id(unit) for unit in units}
    networks = [
        network
        for child in module.children()
        if _holds_parameters(child)
        for network in _runnable(child)
        if id(network) not in chosen
    ]
    tied = _tied_outside(module, networks)
    order = {id(m): index for index, m in enumerate(module.modules())}
    found = [*units, *(network for network in networks if network not in tied)]
    return sorted(found, key=lambda m: order[id(m)])  # parents first: sharded in reverse


def _named_units(module: nn.Module, blocks: list[str]) -> list[nn.Module]:
    """The submodules whose class `blocks` names (a container: its members)."""
    found = [m for m in list(module.modules())[1:] if _class_names(m) & set(blocks)]
    if not found:
        present = sorted({type(m).__name__ for m in module.modules()})
        raise ValueError(
            f"FSDP2Strategy(blocks={blocks}): no submodule of {type(module).__name__} is of "
            f"these classes, so nothing would be sharded per block. Its classes are: "
            f"{', '.join(present)}. Name some of them in the preset's `blocks:`, or leave it "
            "empty for the default units."
        )
    return [unit for m in found for unit in _runnable(m)]


def _default_units(module: nn.Module) -> list[nn.Module]:
    """The members of the outermost containers (repeated layers) and the embeddings.

    A model without containers: the parameter-holding children of the first module,
    from the root down, that has more than one (for a module wrapping one injected
    `net`, the net's layers), and its embeddings.
    """
    layers = _container_members(module)
    inside = {id(m) for layer in layers for m in layer.modules()}
    embeddings = [
        m for m in module.modules() if isinstance(m, nn.Embedding) and id(m) not in inside
    ]
    return [*(layers or _first_branch(module)), *embeddings]


def _container_members(module: nn.Module) -> list[nn.Module]:
    """The parameter-holding members of each container without `forward`, outermost only."""
    if _is_container(module):
        return _runnable(module)
    return [unit for child in module.children() for unit in _container_members(child)]


def _first_branch(module: nn.Module) -> list[nn.Module]:
    while True:
        children = [c for c in module.children() if _holds_parameters(c)]
        if len(children) != 1:
            return children
        module = children[0]


def _runnable(module: nn.Module) -> list[nn.Module]:
    """`module` itself, or for a container without `forward`, its members (recursively)."""
    if not _is_container(module):
        return [module]
    return [unit for m in module.children() if _holds_parameters(m) for unit in _runnable(m)]


def _is_container(module: nn.Module) -> bool:
    """What `fully_shard` refuses: a ModuleList / ModuleDict that does not define forward."""
    return (
        isinstance(module, nn.ModuleList | nn.ModuleDict)
        and type(module).forward is nn.Module.forward
    )


def _holds_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _tied_outside(root: nn.Module, units: list[nn.Module]) -> list[nn.Module]:
    """The units holding a parameter that a module outside the unit holds too."""
    holders: dict[int, set[int]] = {}
    for m in root.modules():
        for parameter in m.parameters(recurse=False):
            holders.setdefault(id(parameter), set()).add(id(m))
    tied = []
    for unit in units:
        inside = {id(m) for m in unit.modules()}
        if any(holders[id(p)] - inside for p in unit.parameters()):
            tied.append(unit)
    return tied


def _listed(root: nn.Module, modules: list[nn.Module]) -> str:
    names = {id(m): name for name, m in root.named_modules()}
    return ", ".join(f"{names[id(m)]} ({type(m).__name__})" for m in modules)


def _class_names(module: nn.Module) -> set[str]:
    cls = type(module)
    return {cls.__name__, f"{cls.__module__}.{cls.__qualname__}"}
