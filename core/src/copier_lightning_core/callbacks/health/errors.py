"""The error a failed health check stops the run with."""

from ...platform.refusal import Refusal


class HealthCheckFailed(Refusal):
    """A health check found a problem that makes further training pointless.

    A `Refusal`: the command line ends with that one paragraph and exit status 1 instead
    of a traceback through Lightning's loops, and Lightning still tears the run down
    (loggers closed, other processes stopped). Plain Python catches it like any other
    exception (`except HealthCheckFailed`).
    """
