"""DDP that trains a module optimizing manually (a GAN's two optimizers) as shipped."""

from typing import Any

from lightning.pytorch import strategies
from lightning.pytorch.utilities import rank_zero_info

from ..platform.private_apis import ddp_wrapper_kwargs


class DDPStrategy(strategies.DDPStrategy):
    """Lightning's `DDPStrategy`, deciding `find_unused_parameters` from the module when not given.

    DDP expects every parameter to get a gradient in each backward pass. Under manual
    optimization with several optimizers, each backward uses part of them (a GAN's
    discriminator loss never reaches the generator), and DDP stops with "parameters that
    were not used in producing the loss". `find_unused_parameters=True` makes DDP walk each
    backward's graph to find them: a cost a module whose one backward uses every parameter
    need not pay. So None (the default) turns it on for a module with
    `automatic_optimization = False` (the only way Lightning trains several optimizers),
    says so once, and leaves it off otherwise; true or false is taken as given.

    Args:
        find_unused_parameters: DDP's option; None: decided from the module as above.
        **kwargs: Lightning's DDPStrategy arguments, and DistributedDataParallel's.
    """

    def __init__(self, find_unused_parameters: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.find_unused_parameters = find_unused_parameters

    def configure_ddp(self) -> None:
        module = self.lightning_module
        find_unused = self.find_unused_parameters
        if find_unused is None:
            find_unused = module is not None and not module.automatic_optimization
            if find_unused:
                rank_zero_info(
                    f"DDP: find_unused_parameters=True, as {type(module).__name__} optimizes "
                    "manually (automatic_optimization = False): each of its backward passes "
                    "may use part of the parameters. If every backward uses them all, set "
                    "`find_unused_parameters: false` in the strategy to save DDP a graph walk "
                    "per backward."
                )
        ddp_wrapper_kwargs(self)["find_unused_parameters"] = find_unused
        super().configure_ddp()
