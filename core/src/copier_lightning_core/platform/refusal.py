"""The one error for what the user got wrong: what is wrong and how to fix it, one paragraph.

Raised where the problem is found (`raise Refusal("--data.batch_size 0: ...")`), by the
library and by your own code alike (a DataModule refusing a path that does not exist).
It is an ordinary exception: a notebook or a script calling a library function (loading
a corrupt checkpoint) catches it like any other and goes on. Only an entry point turns
it into the end of a process (`refusals_exit`): `cli.main`, which every project's
`python -m <package>` and its DDP children go through, prints the paragraph to stderr
and exits with status 1, no traceback. Lightning, which treats any exception in its
loops alike, calls the `on_exception` hooks, finalizes the loggers as "failed" and
tears the run down before it reaches the entry point.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

ERROR = "error: "  # what every printed paragraph starts with; callers reading stderr look for it


class Refusal(Exception):
    """What is wrong and how to fix it, in one paragraph; str() is that paragraph as printed.

    `message` is the paragraph as given; str() adds the "error: " every refusal starts
    with. Several problems found at once (settings this machine cannot run) are several
    paragraphs, each its own "error: ".
    """

    def __init__(self, message: str, *more: str) -> None:
        paragraphs = (message, *more)
        if not more:
            paragraphs = _raised_in_a_worker(type(self), message) or paragraphs
        super().__init__(*paragraphs)  # args: pickled and rebuilt as given
        self.message = "\n\n".join(paragraphs)

    def __str__(self) -> str:
        return "\n\n".join(f"{ERROR}{paragraph}" for paragraph in self.args)


def _raised_in_a_worker(kind: type[Refusal], text: str) -> tuple[str, ...]:
    """The paragraphs of a refusal raised in a DataLoader worker, from torch's text.

    torch sends a worker's exception to the main process as its type and its formatted
    traceback, and raises `kind("Caught <kind> in DataLoader worker process N.\\nOriginal
    Traceback ...")` there. The traceback ends with the refusal as the worker printed it,
    after its qualified class name: those paragraphs are the refusal, without the frames.
    """
    # Named as Python's traceback names a class: without the module for __main__'s.
    module = "" if kind.__module__ in ("__main__", "builtins") else f"{kind.__module__}."
    marker = f"{module}{kind.__qualname__}: {ERROR}"
    if not text.startswith(f"Caught {kind.__name__} in DataLoader worker") or marker not in text:
        return ()
    printed = ERROR + text.rpartition(marker)[2].rstrip("\n")
    return tuple(paragraph.removeprefix(ERROR) for paragraph in printed.split(f"\n\n{ERROR}"))


@contextmanager
def refusals_exit() -> Iterator[None]:
    """At an entry point: a Refusal ends the process with its paragraph and status 1.

    The SystemExit carries the refusal as its `__cause__`, for a caller that runs the
    entry point in its own process (a test); Python prints no traceback for a SystemExit.
    """
    try:
        yield
    except Refusal as refusal:
        # One write: the processes of a DDP run share stderr, and print's two writes (the
        # text, then the newline) let their paragraphs run into each other.
        sys.stderr.write(f"{refusal}\n")
        sys.stderr.flush()
        raise SystemExit(1) from refusal
