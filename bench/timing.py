"""Wall-time measurement shared by the benchmarks that time a forward pass."""

import statistics
import time


def median_ms(run, repeats, warmups=2):
    """The median wall time of `repeats` calls of `run`, in milliseconds, after `warmups`
    calls that are not counted."""
    for _ in range(warmups):
        run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3
