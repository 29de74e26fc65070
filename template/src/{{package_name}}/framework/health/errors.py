# Managed by the template; local edits are merged on update.
"""The error a failed health check stops the run with."""


class HealthCheckFailed(SystemExit):
    """A health check found a problem that makes further training pointless.

    A `SystemExit` carrying its message: the command line ends with that one paragraph
    and exit status 1 instead of a traceback through Lightning's loops, and Lightning
    still tears the run down (loggers closed, other processes stopped). Plain Python
    catches it like any other exception (`except HealthCheckFailed`).
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")
        self.message = message
