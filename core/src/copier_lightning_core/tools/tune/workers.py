"""Which DataLoader worker count to recommend: judged as `fit` will judge it.

`fit`'s DataWaitMonitor suggests more workers when an epoch's data wait fraction is above
its `hint_above`. A recommendation chosen by samples/s alone can sit above that line (in
the main process, `num_workers=0` loads each batch between steps: fast on a busy CPU, yet
all of it is waiting for data), and `fit` then contradicts `tune`. So a count is eligible
only when its epoch's data wait, measured the monitor's way (measure.StepTimer), is not
above the configured `hint_above`; among those, the first count given within `tolerance`
of the best samples/s.
"""

from .measure import Measurement, percent


def choose(measured: list[Measurement], hint_above: float | None, tolerance: float) -> Measurement:
    """The first count (in the order tried) within `tolerance` of the fastest eligible one.

    Eligible: a data wait not above `hint_above` (every count when `fit` judges none, i.e.
    no DataWaitMonitor is configured). When none is eligible, the fastest.
    """
    eligible = [m for m in measured if hint_above is None or m.data_wait <= hint_above]
    pool = eligible or measured
    best = max(pool, key=lambda m: m.samples_per_sec)
    return next(m for m in pool if m.samples_per_sec >= (1 - tolerance) * best.samples_per_sec)


def reasons(
    chosen: Measurement, measured: list[Measurement], hint_above: float | None
) -> list[str]:
    """The comment lines written above the recommended worker count."""
    table = ", ".join(
        f"{m.value}: {m.samples_per_sec:.0f} samples/s, {percent(m.data_wait)} wait"
        for m in measured
    )
    if hint_above is None:
        head = (
            f"num_workers {chosen.value}: the fastest measured (no DataWaitMonitor is "
            "configured, so fit does not judge the data wait)."
        )
    elif chosen.data_wait <= hint_above:
        head = (
            f"num_workers {chosen.value}: {percent(chosen.data_wait)} of an epoch waiting for data, "
            f"under fit's DataWaitMonitor hint_above ({percent(hint_above)}); the fastest such count."
        )
    else:
        head = (
            f"num_workers {chosen.value}: the fastest, but no count tried kept an epoch's data "
            f"wait under fit's DataWaitMonitor hint_above ({percent(hint_above)}): fit will suggest "
            "more workers. Try more (--workers), or a cheaper __getitem__."
        )
    return [head, f"per count: {table}."]
