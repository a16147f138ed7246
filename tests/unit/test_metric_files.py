"""The worker's /metrics merges its processes' sample files even when one of them is still empty.

A process creates its prometheus_client sample file before sizing it; a scrape in that moment, or
after a worker child was killed in it, used to fail the whole merge (``struct.error``) and lose
every other process's samples (prometheus/client_python#1199).
"""

from __future__ import annotations

import struct

import pytest
from prometheus_client import generate_latest
from prometheus_client import multiprocess as upstream
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from worker.service import observability


@pytest.fixture
def sample_dir(tmp_path, monkeypatch):
    """A multiprocess folder with one counter sample of 3 written by a live process (pid 101) and
    the empty file of a process (pid 102) killed before it sized it."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    written = MmapedDict(str(tmp_path / "counter_101.db"))
    key = mmap_key("ratings_demo", "ratings_demo_total", ["outcome"], ["applied"], "demo")
    written.write_value(key, 3.0, 0.0)
    written.close()
    (tmp_path / "counter_102.db").write_bytes(b"")
    return tmp_path


def test_an_empty_sample_file_is_left_out_and_the_others_are_served(sample_dir):
    text = generate_latest(observability.registry()).decode()
    assert 'ratings_demo_total{outcome="applied"} 3.0' in text


def test_prometheus_client_alone_still_fails_on_it(sample_dir):
    """The control case: prometheus_client's own collector on the same folder. When this stops
    failing, upstream has fixed it and :class:`observability.MultiProcessCollector` can go."""
    with pytest.raises(struct.error):
        list(upstream.MultiProcessCollector(None, path=str(sample_dir)).collect())


def test_a_file_with_a_corrupt_header_still_raises(sample_dir):
    """Only an empty file is skipped: a file whose header claims more than it holds is an error."""
    (sample_dir / "counter_103.db").write_bytes(struct.pack("i", 1 << 20) + bytes(4))
    with pytest.raises(Exception):  # noqa: B017, PT011 - prometheus_client's own error, whatever its type
        generate_latest(observability.registry())
