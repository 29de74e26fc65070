"""What runs inside a fit: callbacks, strategy, profiler and progress bar.

configs/default.yaml and the presets wire them into the Trainer by class path; each file
holds one behaviour: bit-exact resume (resume.py), the health checks (health/), compile,
FSDP2 sharding, predictions, throughput, the progress bar, the monitored-metric check,
fine-tuning from other weights, checkpoints without the frozen weights (frozen_weights.py).
They know nothing of the command line; they may import checkpoints and platform, never run
or tools.
"""
