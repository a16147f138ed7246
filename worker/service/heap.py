"""Short garbage-collector pauses in the service's long-lived processes.

CPython's cyclic garbage collector runs a full (generation 2) collection over every tracked object
of the process whenever enough objects have survived the younger collections (Python docs,
``gc``: "Generational garbage collection", and CPython's ``Python/gc.c``: a full collection
waits until the survivors pending since the last one reach a quarter of the long-lived objects).
A worker's main process holds Celery, kombu, the app and their modules, several hundred thousand
objects that live as long as the process; at a steady flow of messages the messages it holds in
flight keep surviving, so a full collection comes every few seconds and walks all of them, and
while it runs the process polls, dispatches and acknowledges nothing: every match waiting on it
waits that long.

:func:`freeze_long_lived` moves every object alive at the moment it is called into the
collector's permanent generation (``gc.freeze``, Python 3.7+), which no collection visits: what the
process builds at start and keeps. The later full collections walk only what was made since.
It is called where a process has finished building what it keeps: a worker's main process when it
is ready (:mod:`worker.service.tasks`, the ``worker_ready`` signal), a worker child when its rating
service is built (``worker_process_init``), the relay when it becomes the active one
(:mod:`worker.service.relay`). A frozen object that later becomes cyclic garbage is not freed
(it stays until the process ends); what is frozen is the start-up state, built once.
"""

from __future__ import annotations

import gc

from worker.service import observability


def freeze_long_lived(process: str) -> int:
    """Collect garbage, then move every object left into the collector's permanent generation;
    return how many objects are frozen in this process now (``gc.get_freeze_count()``).

    ``process``: which process this is (``worker_main``, ``worker_child``, ``relay``), the label
    of the ``ratings_gc_frozen_objects`` gauge. Raises nothing.
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    observability.GC_FROZEN_OBJECTS.labels(process).set(frozen)
    return frozen
