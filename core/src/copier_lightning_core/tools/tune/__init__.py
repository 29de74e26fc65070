"""`tune`: measured recommendations for this machine, written as a commented config.

command.py runs the measurements (measure.py) and writes the config; batch_size.py,
workers.py and learning_rate.py each decide one value and say why.
"""

from .command import tune

__all__ = ["tune"]
