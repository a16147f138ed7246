"""The documentation's generated reference pages, and the runbook they point to, keep up with the code.

The reference pages are built from the code when the site is built (``worker/cli/reference.py``);
these tests fail when the code gains something the pages cannot describe: a setting without a
description, a reason code without a meaning, a ``ratings doctor`` check or a metric without a runbook
entry.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from worker.cli import reference

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "operators" / "runbook.md"


def test_every_setting_has_a_description() -> None:
    """A setting without a description would be an empty row of the settings reference."""
    missing = [row.variable for row in reference.settings_rows() if not row.description.strip()]
    assert not missing, f"settings without a description (Field(description=...)): {missing}"


def test_the_settings_reference_names_every_environment_variable() -> None:
    """The generated table has one row per field, under its environment variable's name."""
    from worker.settings import Settings

    table = reference.render_settings()
    for name in Settings.model_fields:
        assert f"| `RATINGS_{name.upper()}` |" in table


def test_the_reason_codes_include_the_contract_codes_and_the_workers_own() -> None:
    """The scan of the source finds the contract's codes and those given outside schemas/, e.g. by the
    consumer gate and the store (literals the README's hand-kept list once missed)."""
    from schemas.parsing import REASON_CODES

    found = {r.code for r in reference.reason_codes()}
    assert set(REASON_CODES) <= found
    assert {"conflicting_duplicate", "content_type_refused", "invalid_task_message", "unknown_ladder",
            "unsupported_match_shape", "uneven_sides", "internal_error"} <= found


def test_every_reason_code_has_a_meaning_and_every_meaning_a_code() -> None:
    """A new reason code needs its line in ``REASON_MEANINGS``; a removed one leaves none behind."""
    found = {r.code for r in reference.reason_codes()}
    assert sorted(found - set(reference.REASON_MEANINGS)) == []
    assert sorted(set(reference.REASON_MEANINGS) - found) == []


def _field_name(value: ast.expr) -> str:
    """``{ladder}`` -> ``LADDER``, ``{group.group}`` -> ``GROUP``: how the runbook names a check's variable part."""
    expr = value.value if isinstance(value, ast.FormattedValue) else value
    return (expr.attr if isinstance(expr, ast.Attribute) else ast.unparse(expr)).upper()


def _doctor_check_names() -> set[str]:
    """The first argument of every ``Finding(...)`` in the doctor, f-string fields as their name in capitals."""
    tree = ast.parse((ROOT / "worker" / "ops" / "doctor.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Finding" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant):
                names.add(first.value)
            elif isinstance(first, ast.JoinedStr):
                names.add("".join(v.value if isinstance(v, ast.Constant) else _field_name(v) for v in first.values))
    return names


def test_every_doctor_check_has_a_runbook_entry() -> None:
    """Each check ``ratings doctor`` can report is a heading of the runbook saying what to do."""
    headings = {line[4:].strip() for line in RUNBOOK.read_text(encoding="utf-8").splitlines()
                if line.startswith("### ")}
    names = _doctor_check_names()
    assert {"database reachable", "queue depth", "verify LADDER", "consumer group GROUP"} <= names
    assert sorted(names - headings) == []


def _runbook_section(heading: str) -> str:
    """The runbook's text from ``heading`` (a ``## `` line) to the next ``## `` heading."""
    text = RUNBOOK.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_every_metric_has_a_runbook_alert_row_and_every_row_a_metric() -> None:
    """Each metric of the generated list has a row in the runbook's alerts table (an alert, or why
    none), and each row names a metric the code still serves."""
    names = {m.name for m in reference.metric_rows()}
    assert {"ratings_messages_total", "ratings_outbox_lag_seconds", "ratings_player_lock_waits"} <= names
    rows = {line.split("`")[1] for line in _runbook_section("Alerts, one per metric").splitlines()
            if line.startswith("| `ratings_")}
    assert sorted(names - rows) == [], "metrics without a row in the runbook's alerts table"
    assert sorted(rows - names) == [], "rows of the runbook's alerts table naming no metric of the code"


def test_every_runbook_check_entry_is_a_doctor_check() -> None:
    """The runbook describes no check that ``ratings doctor`` does not run."""
    headings = {line[4:].strip() for line in _runbook_section("`ratings doctor` checks").splitlines()
                if line.startswith("### ")}
    assert sorted(headings - _doctor_check_names()) == []


@pytest.mark.parametrize("name", sorted(reference.RENDERERS))
def test_a_marker_expands_to_a_table_or_a_page(name: str) -> None:
    """Every marker the pages may hold expands to Markdown, and an unknown one is an error."""
    text = reference.expand(f"before\n<!-- reference:{name} -->\nafter")
    assert text.startswith("before\n") and text.endswith("\nafter")
    assert "<!-- reference" not in text and len(text) > 200
    with pytest.raises(KeyError, match="no-such-page"):
        reference.expand("<!-- reference:no-such-page -->")


def test_the_readme_stays_short_and_its_python_examples_compile() -> None:
    """The README is the front page (about 250 lines at most; the rest belongs on the site), and its
    Python examples are valid Python."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        compile(block, "README.md", "exec")


def test_the_metrics_reference_gives_each_metric_its_type_and_labels() -> None:
    """Types and label names come from the registry and the scrape-time families, also for metrics
    that have no sample yet (a labelled counter never incremented)."""
    rows = {m.name: m for m in reference.metric_rows()}
    assert (rows["ratings_dead_letters_total"].type, rows["ratings_dead_letters_total"].labels) == ("counter", ("reason",))
    assert (rows["ratings_message_latency_seconds"].type, rows["ratings_message_latency_seconds"].labels) == (
        "histogram", ())
    assert rows["ratings_deferred_matches_total"].labels == ("ladder",)
    assert (rows["ratings_consumer_lag_entries"].type, rows["ratings_consumer_lag_entries"].labels) == ("gauge", ("group", "state"))
    assert rows["ratings_player_lock_waits"].labels == ("ladder", "player_id")
