"""Where an optional value is narrowed before use: URL settings that may be unset, and redis-py's
stream replies, typed ``bytes | str | None`` whatever the client decodes."""

from __future__ import annotations

import pytest

from worker.ops.doctor import run_checks
from worker.redis_url import stream_entries
from worker.settings import SettingNotSet, Settings, required_url


def test_a_set_url_is_returned_as_it_is():
    """The value itself, not a copy rewritten in any way."""
    assert required_url("redis://h:6379/3", "RATINGS_BROKER_URL") == "redis://h:6379/3"


@pytest.mark.parametrize("unset", [None, ""])
def test_an_unset_url_raises_naming_its_environment_variable(unset):
    """None and the empty string (an exported but empty variable) are both unset."""
    with pytest.raises(SettingNotSet, match=r"^RATINGS_DATABASE_URL is not set"):
        required_url(unset, "RATINGS_DATABASE_URL")


def test_doctor_reports_an_unset_database_url_as_a_failed_finding():
    """One failed finding naming the variable, as for an unreachable database, instead of a traceback."""
    settings = Settings(_env_file=None, database_url=None, broker_url=None, events_redis_url=None)
    findings = run_checks(settings, {}, outbox_lag=60.0, max_queue_depth=None, verify=False)
    assert [(f.check, f.ok, f.detail) for f in findings] == [
        ("database reachable", False, "RATINGS_DATABASE_URL is not set")]


def test_stream_entries_give_text_ids_with_their_fields_in_order():
    """Ids as bytes (a client without decode_responses) or str (with it) both come back as text."""
    page = [(b"1700000000000-0", {b"payload": b"{}"}), ("1700000000001-5", {"payload": "{}"})]
    assert stream_entries(page) == [("1700000000000-0", {b"payload": b"{}"}),
                                    ("1700000000001-5", {"payload": "{}"})]


def test_stream_entries_of_an_empty_reply_and_of_a_deleted_entry():
    """None (no reply) and [] give []; an entry without fields (deleted from the stream) is left out."""
    assert stream_entries(None) == [] and stream_entries([]) == []
    assert stream_entries([(b"1-0", None), (b"2-0", {b"k": b"v"})]) == [("2-0", {b"k": b"v"})]
