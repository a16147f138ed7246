"""The no-op task of ``ratings bench``: the framework's ceiling for one task per message.

``ratings bench`` publishes as many ``ratings.noop`` messages as it publishes matches, with the
same body, to the same queue of the same workers (same Celery settings: JSON, late acks, prefetch),
and compares the rating path's throughput with this one. The task does nothing, so its rate is
what Celery, kombu and Redis allow per message on this machine.
"""

from __future__ import annotations

from celery import shared_task

NOOP_TASK = "ratings.noop"


@shared_task(name=NOOP_TASK)  # registered on every app, so on the one worker.bootstrap.create_app builds
def noop(*args, **kwargs) -> None:
    """Do nothing (the benchmark's baseline)."""
    return None
