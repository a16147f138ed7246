"""Hypothesis profiles of the test suite, chosen with ``HYPOTHESIS_PROFILE``.

* ``dev`` (the default): a quarter of each property test's examples, so that the README's test
  command stays short on a laptop; the examples are random on every run (a failure prints the
  seed and the blob to reproduce it).
* ``ci``: every example count as written in the tests (``.ci/run``'s pass on the machine's servers).

A test that needs more or fewer examples than the profile's default writes its count for the ci
profile through :func:`examples`, which scales it to the loaded profile.
"""

from __future__ import annotations

import os

from hypothesis import settings

CI_EXAMPLES = 100
"""``max_examples`` of the ci profile (Hypothesis's own default): counts in the tests are relative to it."""

# No deadline in either: speed is measured by the benchmarks, never asserted by a test, and a
# test's time on a shared 2-core machine running xdist workers says nothing about the code.
settings.register_profile("ci", max_examples=CI_EXAMPLES, deadline=None, print_blob=True)
settings.register_profile("dev", max_examples=CI_EXAMPLES // 4, deadline=None, print_blob=True)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
"""The loaded profile's name (``HYPOTHESIS_PROFILE``; ``dev`` when unset)."""

settings.load_profile(PROFILE)


def examples(ci_count: int) -> int:
    """``ci_count`` (a test's example count under the ci profile) scaled to the loaded profile: the
    same count under ci, a quarter of it (at least 10) under dev."""
    return max(min(10, ci_count), ci_count * settings.default.max_examples // CI_EXAMPLES)
