"""The description of one metric (:class:`MetricInfo`): what the collectors build their scrape-time
families from and what :func:`worker.service.observability.metric_catalogue` lists."""

from __future__ import annotations

from typing import NamedTuple

from prometheus_client.core import GaugeMetricFamily


class MetricInfo(NamedTuple):
    """One metric the worker or the relay serves on ``/metrics``
    (:func:`worker.service.observability.metric_catalogue` lists them all)."""

    name: str
    """As a query names it: a counter with its ``_total``; a histogram's base name (a scrape adds
    ``_bucket``, ``_sum`` and ``_count``)."""
    type: str
    """``counter``, ``gauge`` or ``histogram``."""
    help: str
    """The help text: what one sample or observation is, and its unit."""
    labels: tuple[str, ...]
    """Label names; each takes a bounded set of values (outcomes, reason codes, configured
    ladders, consumer groups, the top players of a window)."""
    recorded_by: str
    """The process that records it and serves its values: ``worker``, ``relay`` or ``worker, relay``
    (an unlabelled counter or histogram defined in a shared module also shows, at 0, on the other's
    ``/metrics``)."""


def gauge_family(info: MetricInfo) -> GaugeMetricFamily:
    """An empty gauge family for a metric read at scrape time, named and described by ``info``."""
    return GaugeMetricFamily(info.name, info.help, labels=list(info.labels))
