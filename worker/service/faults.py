"""Fault injection for the fault-test suite: a process SIGKILLs itself at a named point.

Off unless ``RATINGS_FAULT_INJECTION`` is set (never in production). The value is a comma-separated
list of ``point:every=N``: the process kills itself with SIGKILL on the N-th, 2N-th, ... time it
reaches ``point``. A SIGKILL cannot be caught or cleaned up after, exactly like the kernel's OOM
killer or a node loss, so the windows the fault tests must prove safe are hit precisely:

* ``in_transaction``: a worker child inside the rating transaction, everything written, no COMMIT;
* ``after_commit``: a worker child after COMMIT, before the task returns (so before the ack);
  with batching, one transaction of a whole batch is one arrival at each of these two points;
* ``relay_after_xadd``: the relay after XADD to the stream, before marking the rows published;
* ``rebuild_before_switch``: ``ratings rebuild`` after replaying the snapshot into uncommitted
  rows, before taking the ladder's exclusive lock;
* ``rebuild_after_switch``: ``ratings rebuild`` after the switch-over committed, before stamping
  the ledger rows with the new policy version.
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset({"in_transaction", "after_commit", "relay_after_xadd", "rebuild_before_switch",
                    "rebuild_after_switch"})


class FaultInjector:
    """Counts arrivals at each configured point and SIGKILLs the process on every N-th.

    Raises ``ValueError`` for an unknown point or a malformed spec.
    """

    def __init__(self, spec: str | None):
        self.every: dict[str, int] = {}
        self.arrivals: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in (spec or "").split(","))):
            point, _, arg = part.partition(":")
            if point not in POINTS or not arg.startswith("every="):
                raise ValueError(f"bad fault injection {part!r}: expected <point>:every=<N>, point in {sorted(POINTS)}")
            self.every[point] = int(arg.removeprefix("every="))

    def hit(self, point: str) -> None:
        """Note one arrival at ``point``; SIGKILL this process if it is the N-th."""
        every = self.every.get(point)
        if every is None:
            return
        self.arrivals[point] = self.arrivals.get(point, 0) + 1
        if self.arrivals[point] % every == 0:
            os.kill(os.getpid(), signal.SIGKILL)
