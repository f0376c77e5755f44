"""A statistical profiler of every thread of a process, for the web benches:
`python -m inference.bench.sampler OUT -m daphne ...` runs the module as `python -m` would,
samples the Python stacks of all its threads every `TANDEM_SAMPLE_MS` (default 1), and at
exit (SIGINT/SIGTERM too) writes to OUT the functions that were on a busy stack -- inclusive
and self counts -- leaving out stacks that only wait (an event loop's select, an idle
executor thread). cProfile sees the main thread only: a Django ASGI server spends much of
its time in `sync_to_async` threads.
"""

from __future__ import annotations

import collections
import os
import runpy
import signal
import sys
import threading
import time
import types

IDLE_LEAVES = {
    ("selectors.py", "select"),
    ("threading.py", "wait"),
    ("threading.py", "_wait_for_tstate_lock"),
    ("queue.py", "get"),
    ("thread.py", "_worker"),
    ("base_events.py", "_run_once"),  # only when select is the C leaf: counted as idle
}


def _where(frame) -> tuple[str, str, int]:
    code = frame.f_code
    return (os.path.basename(code.co_filename), code.co_name, code.co_firstlineno)


class Sampler(threading.Thread):
    def __init__(self, out: str, every_s: float):
        super().__init__(daemon=True)
        self.out, self.every_s = out, every_s
        self.inclusive: collections.Counter = collections.Counter()
        self.own: collections.Counter = collections.Counter()
        self.stacks: collections.Counter = collections.Counter()
        self.busy = self.samples = 0

    def run(self) -> None:
        me = threading.get_ident()
        while True:
            time.sleep(self.every_s)
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                self.samples += 1
                leaf = _where(frame)
                if leaf[:2] in IDLE_LEAVES:
                    continue
                self.busy += 1
                self.own[leaf] += 1
                seen, chain = set(), []
                f: types.FrameType | None = frame
                while f is not None:
                    w = _where(f)
                    chain.append(w)
                    if w not in seen:
                        seen.add(w)
                        self.inclusive[w] += 1
                    f = f.f_back
                self.stacks[tuple(reversed(chain[:14]))] += 1

    def dump(self) -> None:
        def fmt(w):
            return f"{w[0]}:{w[2]}({w[1]})"

        lines = [f"busy samples {self.busy} of {self.samples} thread samples"]
        lines.append("\n== inclusive (busy samples with the function on the stack)")
        lines += [f"{n:7d}  {fmt(w)}" for w, n in self.inclusive.most_common(120)]
        lines.append("\n== self (leaf)")
        lines += [f"{n:7d}  {fmt(w)}" for w, n in self.own.most_common(60)]
        lines.append("\n== stacks (innermost 14 frames, outermost first)")
        for stack, n in self.stacks.most_common(40):
            lines.append(f"{n:7d}  " + " > ".join(fmt(w) for w in stack[-8:]))
        with open(self.out, "w") as f:
            f.write("\n".join(lines) + "\n")


class ThreadProfiles:
    """`TANDEM_SAMPLE_MS=0`: cProfile in every thread instead of sampling (exact counts,
    inflated times of small functions), merged into one pstats file at OUT."""

    def __init__(self, out: str):
        import cProfile

        self.out, self.profiles, self._cls = out, [], cProfile.Profile
        threading.setprofile(self._start_thread)
        main = self._cls()
        self.profiles.append(main)
        main.enable()

    def _start_thread(self, *_args) -> None:
        sys.setprofile(None)
        prof = self._cls()
        self.profiles.append(prof)
        prof.enable()

    def dump(self) -> None:
        import pstats

        for prof in self.profiles:
            prof.disable()
        pstats.Stats(*self.profiles).dump_stats(self.out)


def main() -> None:
    out, rest = sys.argv[1], sys.argv[2:]
    every_ms = float(os.environ.get("TANDEM_SAMPLE_MS") or 1)
    if every_ms > 0:
        sampler = Sampler(out, every_ms / 1000)
        sampler.start()
    else:
        sampler = ThreadProfiles(out)  # type: ignore[assignment]

    def stop(signum, _frame):
        sampler.dump()
        os._exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if rest[0] != "-m":
        raise SystemExit("usage: python -m inference.bench.sampler OUT -m MODULE [ARGS]")
    sys.argv = [rest[1], *rest[2:]]
    try:
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    finally:
        sampler.dump()


if __name__ == "__main__":
    main()
