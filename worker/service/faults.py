"""Fault injection for the fault-test suite: a process SIGKILLs itself at a named point.

Off unless ``RATINGS_FAULT_INJECTION`` is set (never in production). The value is a comma-separated
list of ``point:every=N``: the process kills itself with SIGKILL on the N-th, 2N-th, ... time it
reaches ``point``. A SIGKILL cannot be caught or cleaned up after, exactly like the kernel's OOM
killer or a node loss, so the windows the fault tests must prove safe are hit precisely:

* ``in_transaction``: a worker child inside the rating transaction, everything written, no COMMIT;
* ``in_correction``: a worker child inside a rating transaction that re-rated stored matches (a
  late match's correction), everything written, no COMMIT;
* ``after_commit``: a worker child after COMMIT, before the task returns (so before the ack);
  with batching, one transaction of a whole batch is one arrival at each of these two points;
* ``relay_after_xadd``: the relay after XADD to the stream, before marking the rows published;
* ``rebuild_before_switch``: ``ratings rebuild`` after replaying the snapshot into uncommitted
  rows, before taking the ladder's exclusive lock;
* ``rebuild_after_switch``: ``ratings rebuild`` after the switch-over committed, before stamping
  the ledger rows with the new policy version.

``point:stop_once=PATH`` instead freezes the process (SIGSTOP, as a paused VM or a debugger
would): the first process of any worker to reach ``point`` creates ``PATH`` (exclusively), writes
its pid there and stops itself; the test resumes it with SIGCONT. Later arrivals do nothing.
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset({"in_transaction", "in_correction", "after_commit", "relay_after_xadd", "rebuild_before_switch",
                    "rebuild_after_switch"})


class FaultInjector:
    """Counts arrivals at each configured point and SIGKILLs the process on every N-th.

    Raises ``ValueError`` for an unknown point or a malformed spec.
    """

    def __init__(self, spec: str | None):
        self.every: dict[str, int] = {}
        self.arrivals: dict[str, int] = {}
        self.stop_once: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in (spec or "").split(","))):
            point, _, arg = part.partition(":")
            if point in POINTS and arg.startswith("stop_once=") and len(arg) > len("stop_once="):
                self.stop_once[point] = arg.removeprefix("stop_once=")
                continue
            if point not in POINTS or not arg.startswith("every="):
                raise ValueError(f"bad fault injection {part!r}: expected <point>:every=<N> or "
                                 f"<point>:stop_once=<path>, point in {sorted(POINTS)}")
            self.every[point] = int(arg.removeprefix("every="))

    def hit(self, point: str) -> None:
        """Note one arrival at ``point``; SIGKILL this process if it is the N-th (or SIGSTOP it,
        the first time any process arrives, for ``stop_once``)."""
        if point in self.stop_once:
            self._stop_once(self.stop_once[point])
        every = self.every.get(point)
        if every is None:
            return
        self.arrivals[point] = self.arrivals.get(point, 0) + 1
        if self.arrivals[point] % every == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    @staticmethod
    def _stop_once(path: str) -> None:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as out:
            out.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
