# Managed by the template; local edits are merged on update.
"""What runs inside a fit: the callbacks, strategy and progress bar configs/default.yaml
and the presets wire into the Trainer.

Each file holds one behaviour and is named in a config by its class path: bit-exact
resume (resume.py), the health checks (health/), compile, FSDP2 sharding, predictions,
throughput, the progress bar, the metric check, fine-tuning from other weights. They know
nothing of the command line; they may import checkpoints and platform, never run or tools.
"""
