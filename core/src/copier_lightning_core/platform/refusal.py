"""The one error a command refuses bad input with: one paragraph, exit status 1.

Raised where the problem is found (`raise Refusal("--data.batch_size 0: ...")`), by the
library and by your own code alike (a DataModule refusing a path that does not exist).
It is a `SystemExit` whose code is the paragraph, so the process ends the way every
command line error here ends, jsonargparse's own included: Python prints the paragraph to
stderr and exits with status 1, no traceback; and Lightning, which lets a SystemExit pass
through its loops, still tears the run down. In a test, or a caller running a command in
its own process, it is caught as `SystemExit` (or `Refusal`) with the paragraph as `code`.
"""


class Refusal(SystemExit):
    """What is wrong and how to fix it, in one paragraph; `code` is that paragraph as printed.

    `message` is the paragraph as given; `code` adds the "error: " every refusal starts
    with, which callers reading a command's stderr look for. Several problems found at
    once (settings this machine cannot run) are several paragraphs, each its own "error: ".
    """

    def __init__(self, message: str, *more: str) -> None:
        super().__init__("\n\n".join(f"error: {paragraph}" for paragraph in (message, *more)))
        self.message = "\n\n".join((message, *more))
