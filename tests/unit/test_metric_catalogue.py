"""metric_catalogue(), the source of the docs' metrics page, against the metric objects the
service defines: none left out, none with an unbounded label."""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase

from worker.service import observability
from worker.service.observability import metric_catalogue


def test_every_client_metric_of_the_service_is_in_the_catalogue():
    """Each Counter, Gauge and Histogram defined in worker.service.observability is listed, under
    the name a query uses (a counter with ``_total``), with its type, help and label names."""
    defined = [v for v in vars(observability).values() if isinstance(v, MetricWrapperBase)]
    listed = {m.name: m for m in metric_catalogue()}
    assert len(defined) >= 12
    for metric in defined:
        name = metric._name + ("_total" if metric._type == "counter" else "")
        assert name in listed, name
        assert (listed[name].type, listed[name].help, listed[name].labels) == (
            metric._type, metric._documentation, tuple(metric._labelnames))


def test_each_entry_has_a_help_text_a_process_and_only_bounded_labels():
    """No entry without a help text or a recording process; a player id is a label only of the
    top-N gauges (``ratings_player_*``), never of a counter or histogram that would grow a series
    per player."""
    catalogue = metric_catalogue()
    assert [m.name for m in catalogue] == sorted({m.name for m in catalogue})
    for m in catalogue:
        assert m.name.startswith("ratings_") and m.help and m.recorded_by in ("worker", "relay", "worker, relay"), m
        assert m.type in ("counter", "gauge", "histogram"), m
        assert not {"player", "player_id", "match_id"} & set(m.labels) or (
            m.type == "gauge" and m.name.startswith("ratings_player_")), m
