"""Short garbage-collector pauses in the service's long-lived processes.

CPython's cyclic garbage collector runs a full (generation 2) collection over every tracked object
of the process whenever enough objects have survived the younger collections (Python docs,
``gc``: "Generational garbage collection", and CPython's ``Python/gc.c``: a full collection
waits until the survivors pending since the last one reach a quarter of the long-lived objects).
A worker's main process and its child each hold Celery, kombu, psycopg, pydantic, the app and
their modules: about 110,000 objects that live as long as the process. At a steady flow of
messages enough objects keep surviving that a full collection comes every few seconds and walks
all of them (100 to 270 ms in a child, measured with ``ratings bench``); while it runs, the child's
batch and the messages its main process holds wait.

:func:`freeze_long_lived` moves every object alive at the moment it is called into the
collector's permanent generation (``gc.freeze``, Python 3.7+), which no collection visits: what the
process builds at start and keeps. The later full collections walk only what was made since.
It is called once a process has built what it keeps: a worker's main process when it is ready
(:mod:`worker.service.tasks`, the ``worker_ready`` signal), a worker child after building its
rating service (``worker_process_init``; if that failed, the service is built later, unfrozen),
the relay once at start, before its loop (:mod:`worker.service.relay`; not per connection, which
would freeze each connection's objects anew). With ``--pool solo`` the main process does both
(one process); with ``--pool threads`` only the main process's call runs. A frozen object that
later becomes cyclic garbage is not freed (it stays until the process ends); what is frozen is the
start-up state, built once.
"""

from __future__ import annotations

import gc

from worker.service import observability


def freeze_long_lived(process: str) -> int:
    """Collect garbage, then move every object left into the collector's permanent generation;
    return how many objects are frozen in this process now (``gc.get_freeze_count()``).

    ``process``: which process this is (``worker_main``, ``worker_child``, ``relay``), the label
    of the ``ratings_gc_frozen_objects`` gauge. Raises only what writing the gauge raises (an
    ``OSError`` from prometheus_client's multiprocess files).
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    observability.GC_FROZEN_OBJECTS.labels(process).set(frozen)
    return frozen
