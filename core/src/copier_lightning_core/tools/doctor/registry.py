"""The checks' registry: each check has a stable ID, a name, and one job.

IDs never change meaning or get reused: CHECKLIST.md, CI logs and `# doctor: ignore[...]`
comments refer to them. A new check takes the next free number.
"""

from collections.abc import Callable
from dataclasses import dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Result:
    """What a check found (`detail`) and, unless it passed, how to fix it."""

    status: str
    detail: str
    fix: str = ""


def passed(detail: str) -> Result:
    return Result(PASS, detail)


def warned(detail: str, fix: str) -> Result:
    return Result(WARN, detail, fix)


def failed(detail: str, fix: str) -> Result:
    return Result(FAIL, detail, fix)


@dataclass(frozen=True)
class Check:
    """A registered check. `static` ones read only source files: no config, no torch."""

    id: str
    name: str
    run: Callable[..., Result]
    static: bool


CHECKS: dict[str, Check] = {}


def check(
    check_id: str, name: str, *, static: bool = False
) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register `fn(context) -> Result` under a stable ID."""

    def register(fn: Callable[..., Result]) -> Callable[..., Result]:
        if check_id in CHECKS:
            raise ValueError(f"doctor check ID {check_id} is registered twice")
        CHECKS[check_id] = Check(check_id, name, fn, static)
        return fn

    return register
