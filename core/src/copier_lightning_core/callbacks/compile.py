"""torch.compile for any LightningModule, with checkpoints that stay loadable without it.

Why a callback rather than `torch.compile(model)`: a compiled module (`OptimizedModule`)
saves its weights under `_orig_mod.` keys, which an uncompiled model refuses to load.
Replacing only the `forward` of the chosen module by its compiled version leaves the
module tree, and so every state_dict key, as it was. (`nn.Module.compile()` keeps keys
clean too, but on a plain `nn.Sequential` it compiles nothing at all.)

The compiled forward runs from the first batch of the command's own loop on; calls before
it (Lightning's model summary, the sanity check, other callbacks' probes) run eager. The
model summary runs `example_input_array` through the module under a FLOP counter, a torch
dispatch mode, and dynamo does not trace under one: it runs the frame, and every module
forward called from it, uncompiled, and marks their code to be skipped for the rest of the
process. A forward first compiled there would never compile at all.

The callback also refuses to pretend: after the first batch it checks that dynamo really
compiled a graph (torch has no public "did this compile" query: see private_apis.py), and
a compilation error names the module and the option to change, in one paragraph.
"""

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from ..platform.private_apis import (
    DynamoError,
    compiled_graph_count,
    graph_breaks,
    has_compiled_code,
)
from .health.errors import HealthCheckFailed


class CompileError(HealthCheckFailed):
    """torch.compile failed, or compiled nothing, and `fallback_to_eager` is off."""


class TorchCompile(L.Callback):
    """Compiles the forward of the LightningModule (or of one of its submodules).

    Args:
        submodule: dotted attribute path of the module whose `forward` is compiled; "" (the
            default) is the LightningModule itself, which covers everything its steps run
            through `self(...)`. Set it (e.g. "net") when the steps call a network directly.
        mode: "default", "reduce-overhead" (CUDA graphs: less launch overhead, more memory,
            static shapes) or "max-autotune" (benchmarks kernels: long first compile).
        fullgraph: refuse graph breaks; a break then fails with its reason. Use it to find
            breaks, then turn it off to train.
        dynamic: None lets dynamo mark sizes dynamic after a recompile; False specialises on
            every shape (recompiles when the last batch is smaller); True assumes dynamic.
        backend: "inductor" (generates kernels) or e.g. "eager" (traces only: a cheap check).
        fallback_to_eager: on a compilation failure, warn and run the module uncompiled
            instead of stopping the run.
    """

    def __init__(
        self,
        submodule: str = "",
        mode: Literal["default", "reduce-overhead", "max-autotune"] = "default",
        fullgraph: bool = False,
        dynamic: bool | None = None,
        backend: str = "inductor",
        fallback_to_eager: bool = False,
    ) -> None:
        self.submodule = submodule
        self.mode = mode
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.backend = backend
        self.fallback_to_eager = fallback_to_eager
        self.compiled = False  # dynamo captured a graph of the target's forward
        self._target: nn.Module | None = None
        self._path = ""  # the compiled module, named from the LightningModule's class
        self._eager = False  # fell back to eager after a failure
        self._live = False  # the command's own loop has begun: forward runs compiled
        self._calls = 0  # calls of the compiled forward
        self._calls_before_first_batch = 0
        self._checked = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._target is not None:  # already compiled for an earlier stage of this run
            return
        try:
            target = pl_module.get_submodule(self.submodule)
        except AttributeError:
            raise CompileError(
                f"TorchCompile(submodule={self.submodule!r}): {type(pl_module).__name__} has no "
                "such submodule. Name an attribute holding an nn.Module (e.g. 'net'), or \"\" "
                "for the LightningModule itself."
            ) from None
        eager_forward = target.forward
        compiled_forward = torch.compile(
            eager_forward,
            mode=None if self.mode == "default" else self.mode,
            fullgraph=self.fullgraph,
            dynamic=self.dynamic,
            backend=self.backend,
        )
        # An instance attribute: no new submodule, so no `_orig_mod.` in the state_dict.
        target.forward = self._guard(compiled_forward, eager_forward)
        self._target = target
        self._path = ".".join(filter(None, [type(pl_module).__name__, self.submodule]))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._target is not None and "forward" in vars(self._target):
            del self._target.forward  # the class's own forward again
        self._target, self._live = None, False

    # The batches of the command's own loop (training, in fit) run the compiled forward,
    # and the first must: a module whose steps bypass it would train uncompiled, silently.
    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._batch_start()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._first_batch_end()

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.state.fn == "validate":
            self._batch_start()

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.state.fn == "validate":
            self._first_batch_end()

    def on_test_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.state.fn == "test":
            self._batch_start()

    def on_test_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.state.fn == "test":
            self._first_batch_end()

    def on_predict_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._batch_start()

    def on_predict_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._first_batch_end()

    def _batch_start(self) -> None:
        self._live = True
        self._calls_before_first_batch = self._calls

    def _first_batch_end(self) -> None:
        if self._checked or self._eager:
            return
        self._checked = True
        if self._calls == self._calls_before_first_batch:
            self._fail(
                f"torch.compile compiled nothing: the steps did not call {self._name}.forward "
                "in the first batch, so the run would be uncompiled. Point `submodule:` of the "
                "TorchCompile callback at the module the steps call (e.g. 'net').",
                None,
            )
        elif not self.compiled:
            self._fail(
                f"torch.compile compiled nothing: {self._name}.forward ran in the first batch, "
                "but dynamo skipped it, so the run would be uncompiled. Dynamo skips a function "
                "wrapped in `torch.compiler.disable`, and, for the rest of the process, code it "
                "first met under a torch dispatch mode (a FLOP counter such as "
                "`torch.utils.flop_counter.FlopCounterMode`). Run with `TORCH_LOGS=+dynamo` and "
                "look for 'skipping: forward' to see why, or set `fallback_to_eager: true` in the "
                "TorchCompile callback to train uncompiled.",
                None,
            )
        else:
            # Said once, when it is known: which module runs compiled, and how (the rest of
            # the module's code, e.g. a second network the steps call directly, runs eager).
            dynamic = {None: "auto", True: "true", False: "false"}[self.dynamic]
            rank_zero_info(
                f"TorchCompile: compiled the forward of {self._path} "
                f"({type(self._target).__name__}) with mode {self.mode}, backend {self.backend}, "
                f"fullgraph {str(self.fullgraph).lower()}, dynamic {dynamic}."
            )

    @property
    def _name(self) -> str:
        owner = type(self._target).__name__ if self._target is not None else "?"
        return f"{owner} (submodule {self.submodule!r})" if self.submodule else owner

    def _guard(self, compiled: Callable[..., Any], eager: Callable[..., Any]) -> Callable[..., Any]:
        """`compiled`, falling back to (or stopping with) `eager` as configured."""

        @functools.wraps(eager)
        def forward(*args: Any, **kwargs: Any) -> Any:
            if self._eager or not self._live:
                return eager(*args, **kwargs)
            before = compiled_graph_count()
            breaks = graph_breaks() if self._calls == 0 else None  # said after the first call
            self._calls += 1
            try:
                output = compiled(*args, **kwargs)
            except DynamoError as error:
                hint = (
                    "set `fullgraph: false` to let dynamo split the graph at the break"
                    if self.fullgraph
                    else "set `fullgraph: true` to see where the graph breaks"
                )
                self._fail(
                    f"torch.compile failed on {self._name}.forward: {_first_line(error)}. "
                    f"In the TorchCompile callback (configs/presets/compile*.yaml), {hint}, or "
                    "`fallback_to_eager: true` to train uncompiled.",
                    error,
                )
                return eager(*args, **kwargs)
            if not self.compiled:
                self.compiled = compiled_graph_count() > before or has_compiled_code(
                    eager.__code__  # compiled by an earlier run
                )
            if breaks is not None:
                self._tell_breaks(graph_breaks() - breaks)
            return output

        return forward

    def _tell_breaks(self, breaks: Counter[str]) -> None:
        """Say once how often dynamo broke the forward's graph, and where first: each
        break returns to Python between compiled graphs, which costs time every step."""
        count = sum(breaks.values())
        if count:
            first = next(iter(breaks)).strip().splitlines()[0]
            rank_zero_info(
                f"{BREAKS_SAID}{count} graph break(s) in {self._name}.forward{BREAKS_END} "
                f"to Python between compiled graphs every step; the first: {first}. "
                "`fullgraph: true` stops at the first with its place in the code."
            )

    def _fail(self, message: str, error: Exception | None) -> None:
        if not self.fallback_to_eager:
            raise CompileError(message) from error
        rank_zero_warn(f"{message} Falling back to eager.")
        self._eager = True


BREAKS_SAID, BREAKS_END = "TorchCompile: ", ", each a return"  # the note _tell_breaks logs


def graph_breaks_said(output: str) -> str | None:
    """ "N graph break(s) in X.forward", as a run's output (`doctor --try`) says it, or None."""
    for line in output.splitlines():
        said = line.partition(BREAKS_SAID)[2]
        if "graph break(s) in" in said:
            return said.partition(BREAKS_END)[0]
    return None


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
