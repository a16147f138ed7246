"""``ratings bench``: the rating path measured against the framework's own ceiling, in one run.

Three parts, each figure printed beside a baseline measured in the same run on the same machine:

* **engine** (no server): :func:`engine.rate` on a 1v1 classic and a 1v1 Sedma match,
  :func:`engine.replay.replay` and :func:`engine.fast_replay.replay` over a list of matches,
  against ``elote``'s ``EloCompetitor`` and a plain inline Python loop of the Elo formula;
* **service** (real worker and relay processes on the configured servers, embedded ones when no
  URL is set): for each worker count, the baseline (as many ``ratings.noop`` Celery tasks as
  matches, same body, same queue, same workers and settings: the ceiling for one task per
  message) and the rating path (generated matches from first publish to last event on the
  stream, latency percentiles publish → commit and publish → event), each end to end (publisher
  processes beside the workers, :mod:`.publishers`) and consumers only (queue filled first), with
  the publishers' own capacity and CPU time per match by process (:mod:`.cpu`); at the main worker count
  also half of full load (paced publishing), a hot-player run (20 % of matches involve one of
  10 players) and worker memory (RSS) at start and end;
* **ledger at scale**: a ledger of ``--ledger-size`` matches written straight into PostgreSQL
  (``generate_series``), the players table computed by a streaming replay, then ``verify`` timed
  at 10 %, 30 % and 100 % of the size, each in a fresh process whose peak RSS is recorded.

The service part runs in a database of its own (created, dropped at the end) with its own queue
and stream, so a shared server is not disturbed. How each figure is measured:

* times are wall-clock seconds (``time.time()``) of this process, of the workers (the
  ``occurred_at`` they write inside the rating transaction, just before its last statements and
  COMMIT) and of Redis (the millisecond part of a stream entry's id): all one machine's clock,
  which is why the servers must be local for the latency figures to mean anything;
* baseline throughput: messages / (last acknowledgement − first publish), the end seen by polling
  the queue and the broker's unacknowledged set every 5 ms; with batching on, the no-op runs both
  on the batched workers (whose prefetch is 2 x the batch size) and on workers started with
  ``RATINGS_BATCH_SIZE=1`` (the configured prefetch multiplier), and the faster of the two is the
  baseline;
* rating throughput: matches / (last event on the stream − first publish); also to the last commit.
"""


from worker.devtools.bench.common import BenchConfig  # noqa: F401
from worker.devtools.bench.run import run_bench  # noqa: F401
