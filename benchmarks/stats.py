"""The one way the benchmarks report a spread of ratios or times."""

import statistics


def spread(values: list[float], digits: int = 3) -> str:
    """Median, interquartile range (from 4 values) and min-max of `values`, as one line."""
    f = f".{digits}f"
    text = f"median {statistics.median(values):{f}}, min-max {min(values):{f}}-{max(values):{f}}"
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4)
        text += f", IQR {q1:{f}}-{q3:{f}}"
    return f"{text} ({len(values)} paired repeats)"
