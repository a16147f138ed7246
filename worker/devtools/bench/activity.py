"""``ratings bench`` part: where the PostgreSQL backends spend their active time during a run.

The CPU counters (:mod:`.cpu`) say how much each process worked; they do not say how long a rating
transaction waited, nor for what. A wait the service records itself (``player_lock_waits``) covers
the rows :func:`worker.store.locking.lock_players` could not lock at once, not the others: creating
a new player's row waits, inside ``INSERT ... ON CONFLICT DO NOTHING``, for any transaction that
inserted the same player and has not committed yet, and nothing records that wait.

:class:`ActivitySampler` reads ``pg_stat_activity`` every ``interval`` seconds from a session of its
own (``application_name`` :data:`worker.devtools.bench.sql.BENCH_OBSERVER_APPLICATION`, left out of the
service's CPU) while a run goes on, and counts each backend running a statement by what it waits for
(``Lock:transactionid``, ``IO:WALSync``, ... or ``running``: on a CPU or waiting for one) and by
which statement of the service it runs (:func:`worker.devtools.bench.sql.statement_label`). The
counts divided by the samples give the mean number of backends in each state; their shares of
all counts, where the backends' active time went. A sample is one small query of the observer's
session (its CPU, not measured apart, counts as "everything else").

A sample in which :data:`CHAIN_SAMPLE_WAITERS` or more backends wait for a lock also reads the
heads of the waits (:func:`worker.devtools.bench.sql.lock_chain_heads`: the backends others wait for
that wait for no lock themselves, by state and statement): a stall of every worker shows whether
its head is a transaction idle between two statements (its client busy, or waiting), one running a
statement, or none (the waits form a cycle of short, retried lock waits, which PostgreSQL's
deadlock detector does not see whole).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from worker.devtools.bench import sql as bench_sql
from worker.devtools.bench.common import SessionLoop
from worker.devtools.bench.sql import statement_label

CHAIN_SAMPLE_WAITERS = 3
"""Backends waiting for a lock in one sample from which the sampler reads the waits' heads."""


def summarize_heads(heads: Counter, chain_samples: int, top: int = 5) -> dict[str, Any]:
    """``heads`` (``(state, statement) -> times seen``) over the ``chain_samples`` samples with
    :data:`CHAIN_SAMPLE_WAITERS` or more lock waiters as ``{"samples", "headless_samples", "top":
    [{"state", "statement", "per_sample"}, ...]}``: ``headless_samples`` (counted under the key
    ``("none", "")``) had waiters and no head; ``per_sample`` is times seen over ``chain_samples``."""
    headless = heads.get(("none", ""), 0)
    seen = Counter({k: n for k, n in heads.items() if k != ("none", "")})
    return {"samples": chain_samples, "headless_samples": headless,
            "top": [{"state": state, "statement": statement, "per_sample": round(n / chain_samples, 2)}
                    for (state, statement), n in seen.most_common(top)]}


def summarize(counts: Counter, samples: int, top: int = 8) -> dict[str, Any]:
    """``counts`` (``(wait, statement) -> backends seen``) over ``samples`` samples as
    ``{"samples", "mean_active_backends", "lock_waiting_share", "top": [{"wait", "statement", "share",
    "mean_backends"}, ...]}``: ``share`` of all backend counts (the backends' active time), most
    first; ``lock_waiting_share`` the share in a ``Lock`` wait (a row, a transaction, an advisory
    lock); None where nothing was seen."""
    total = sum(counts.values())
    locked = sum(n for (wait, _), n in counts.items() if wait.startswith("Lock:"))
    return {
        "samples": samples,
        "mean_active_backends": round(total / samples, 2) if samples else None,
        "lock_waiting_share": round(locked / total, 3) if total else None,
        "top": [{"wait": wait, "statement": statement, "share": round(n / total, 3),
                 "mean_backends": round(n / samples, 2)} for (wait, statement), n in counts.most_common(top)],
    }


class ActivitySampler(SessionLoop):
    """Samples the active backends of ``database_url``'s database every ``interval`` seconds in a
    thread, between ``__enter__`` and ``__exit__``; :meth:`summary` gives :func:`summarize` of them
    (``interval`` 0: no sampling, an empty summary)."""

    application = bench_sql.BENCH_OBSERVER_APPLICATION
    name = "bench-activity"

    def __init__(self, database_url: str, interval: float = 0.04):
        super().__init__(database_url, interval)
        self.counts: Counter = Counter()
        self.samples = 0
        self.heads: Counter = Counter()
        self.chain_samples = 0

    def tick(self, conn) -> None:
        """One sample: count each active backend by (wait, statement); with
        :data:`CHAIN_SAMPLE_WAITERS` or more of them waiting for a lock, the waits' heads too."""
        waiting = 0
        for wait, query in bench_sql.active_backends(conn):
            self.counts[(wait, statement_label(query or ""))] += 1
            waiting += wait.startswith("Lock:")
        self.samples += 1
        if waiting >= CHAIN_SAMPLE_WAITERS:
            self.chain_samples += 1
            heads = bench_sql.lock_chain_heads(conn)
            for state, query in heads:
                self.heads[(state or "", statement_label(query or ""))] += 1
            if not heads:
                self.heads[("none", "")] += 1

    def summary(self) -> dict[str, Any]:
        """What was sampled (see :func:`summarize`; ``lock_chain_heads``: :func:`summarize_heads`)."""
        return summarize(self.counts, self.samples) | {
            "interval_s": self.interval, "lock_chain_heads": summarize_heads(self.heads, self.chain_samples)}
