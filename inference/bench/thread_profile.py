"""cProfile on CPU time, per thread: `python -m inference.bench.thread_profile OUT -m MODULE
ARGS...` runs MODULE as `python -m` would, profiling its main thread (an ASGI server's event
loop) into OUT and its executor threads (the web process's sync lanes) into OUT.lanes, each
timed by `time.thread_time`: what a thread spent on the CPU, not the wall time a busy,
shared machine adds when it preempts it (cProfile's default clock). Read with
`python -m pstats OUT`. The web bench uses it for `--profile FILE.prof`.
"""

from __future__ import annotations

import concurrent.futures.thread as futures_thread
import cProfile
import os
import pstats
import runpy
import signal
import sys
import time

_lanes: list[cProfile.Profile] = []


def _profiled(worker):
    def run(*args, **kwargs):
        profile = cProfile.Profile(time.thread_time)
        _lanes.append(profile)
        profile.enable()
        try:
            return worker(*args, **kwargs)
        finally:
            profile.disable()

    return run


def main() -> None:
    out, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit(__doc__)
    sys.argv = [module, *rest]
    sys.path.insert(0, os.getcwd())  # as `python -m`: the working directory first
    futures_thread._worker = _profiled(futures_thread._worker)
    # A server re-raises the SIGTERM it stopped on (uvicorn): an exit here, so the stats
    # are written (the default action would end the process first).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(out)
        if _lanes:
            stats = pstats.Stats(_lanes[0])
            for lane in _lanes[1:]:
                stats.add(lane)
            stats.dump_stats(out + ".lanes")


if __name__ == "__main__":
    main()
