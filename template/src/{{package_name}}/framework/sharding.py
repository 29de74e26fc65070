# Managed by the template; local edits are merged on update.
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
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard


class FSDP2Strategy(ModelParallelStrategy):
    """Fully shards parameters, gradients and optimizer states across every process.

    Args:
        blocks: class names (`TransformerEncoderLayer`) or dotted paths
            (`torch.nn.TransformerEncoderLayer`) of the submodules that become shard units:
            one all-gather each before its forward and backward. Empty (the default): the
            parameter-holding children of the first module, from the root down, that has
            more than one (for a module wrapping one injected `net`, the net's layers).
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
        units = find_blocks(module, self.blocks)
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
    """The submodules named by class in `blocks`, or the default blocks (see FSDP2Strategy)."""
    if not blocks:
        while True:
            children = [c for c in module.children() if any(True for _ in c.parameters())]
            if len(children) != 1:
                return children
            module = children[0]
    found = [m for m in list(module.modules())[1:] if _class_names(m) & set(blocks)]
    if not found:
        present = sorted({type(m).__name__ for m in module.modules()})
        raise ValueError(
            f"FSDP2Strategy(blocks={blocks}): no submodule of {type(module).__name__} is of "
            f"these classes, so nothing would be sharded per block. Its classes are: "
            f"{', '.join(present)}. Name some of them in the preset's `blocks:`, or leave it "
            "empty for the default blocks."
        )
    return found


def _class_names(module: nn.Module) -> set[str]:
    cls = type(module)
    return {cls.__name__, f"{cls.__module__}.{cls.__qualname__}"}
