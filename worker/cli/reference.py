"""Reference pages generated from the code: the CLI, the settings, the reason codes and the metrics.

The documentation site (``mkdocs build``, ``mkdocs.yml``) loads this module as a hook: a page
holding a marker such as ``<!-- reference:settings -->`` gets the Markdown that :data:`RENDERERS`
names in its place, built from the objects the service itself uses (the Typer app, the
pydantic ``Settings`` model, the dead-letter reason codes in the source, the Prometheus metrics the
worker and the relay register). So a page can never fall behind the code it describes. It lives in
the CLI package because the CLI is the one layer allowed to import every other.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from worker.service.metric_info import MetricInfo

ROOT = Path(__file__).resolve().parents[2]
"""The repository (or installed tree) holding ``engine/``, ``schemas/`` and ``worker/``."""

MARKER = re.compile(r"<!--\s*reference:([a-z-]+)\s*-->")
"""A page's placeholder for a generated block: ``<!-- reference:NAME -->``."""


def _cell(text: str) -> str:
    """``text`` fit for one Markdown table cell (pipes escaped, one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- CLI ---------------------------------------------------------------------------------------


def render_cli() -> str:
    """Every ``ratings`` command with its usage, arguments and options, as Markdown.

    Built by Typer's own documentation generator (``typer.cli.get_docs_for_click``, what
    ``typer ... utils docs`` prints) from the app ``ratings`` runs.
    """
    import typer
    import typer.main
    from typer.cli import get_docs_for_click
    from typer.core import MARKUP_MODE_KEY

    from worker.cli.main import app

    command = typer.main.get_command(app)
    # As `typer ... utils docs` does: the app's markup mode, so help texts render as the CLI shows them.
    ctx = typer.Context(command, info_name="ratings", obj={MARKUP_MODE_KEY: app.rich_markup_mode})
    text = get_docs_for_click(obj=command, ctx=ctx, name="ratings")
    # Typer's page starts at level 1 and nests one level per group; the site's page has its own title.
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.MULTILINE)


# --- settings ----------------------------------------------------------------------------------


class SettingRow(NamedTuple):
    """One setting as the reference lists it."""

    variable: str
    """The environment variable, prefix included (``RATINGS_DATABASE_URL``)."""
    type: str
    default: str
    description: str


def settings_rows() -> list[SettingRow]:
    """Every field of :class:`worker.settings.Settings`: variable, type, default and description.

    An empty description stays empty here; ``tests/unit/test_docs_reference.py`` fails on it.
    """
    from pydantic_core import PydanticUndefined

    from worker.settings import Settings

    prefix = str(Settings.model_config.get("env_prefix", ""))
    rows = []
    for name, field in Settings.model_fields.items():
        annotation = field.annotation
        kind = getattr(annotation, "__name__", None) or str(annotation)
        if " | " in str(annotation) or "Optional" in str(annotation):
            kind = str(annotation).replace("typing.", "").replace("pathlib.", "")
        default = field.default
        if default is PydanticUndefined:
            shown = "required"
        elif default is None:
            shown = "unset"
        elif isinstance(default, Path):
            shown = f"`{default.relative_to(ROOT) if default.is_relative_to(ROOT) else default}`"
        else:
            shown = f"`{default!r}`" if isinstance(default, str) else f"`{default}`"
        rows.append(SettingRow(prefix + name.upper(), kind, shown, field.description or ""))
    return rows


def render_settings() -> str:
    """The settings table, one row per environment variable."""
    lines = ["| variable | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.variable}` | `{_cell(r.type)}` | {_cell(r.default)} | {_cell(r.description)} |"
              for r in settings_rows()]
    return "\n".join(lines) + "\n"


# --- reason codes ------------------------------------------------------------------------------

_CODE = re.compile(r"^[a-z]+(_[a-z]+)+$")
# Calls whose first or second positional argument is a dead letter's reason code: the dead-letter
# records of the rating service, the consumer gate and the store, and the engine's refusal.
_DEAD_LETTER_CALLS = {"BatchDeadLetter", "Dead", "_dead_letter", "_annulment_dead_letter", "UnratableMatch"}


class ReasonCode(NamedTuple):
    """A dead letter's reason code and the module that gives it."""

    code: str
    module: str
    """Dotted module name (``schemas.parsing``)."""


def _called_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _codes_in(tree: ast.AST) -> Iterator[str]:
    """Reason-code literals of ``tree``: arguments of the dead-letter calls, ``REASON_CODE`` and
    ``REASON_CODES`` constants."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node) in _DEAD_LETTER_CALLS:
            for arg in node.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _CODE.match(arg.value):
                    yield arg.value
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if names & {"REASON_CODE", "REASON_CODES"} and node.value is not None:
                for const in ast.walk(node.value):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str) and _CODE.match(const.value):
                        yield const.value


def reason_codes(packages: Iterable[str] = ("schemas", "engine", "worker")) -> list[ReasonCode]:
    """Every dead letter's reason code found in the source of ``packages`` (development tools left
    out), with the module giving it, in source order (the match contract's codes first, in their
    priority order)."""
    found: dict[str, ReasonCode] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "devtools" in relative.parts:
                continue
            module = ".".join(relative.with_suffix("").parts)
            for code in _codes_in(ast.parse(path.read_text(encoding="utf-8"))):
                found.setdefault(code, ReasonCode(code, module))
    return list(found.values())


REASON_MEANINGS: dict[str, str] = {
    "too_large": "the raw message is over 64 KiB",
    "not_json": "the body is not UTF-8 JSON (a byte order mark included)",
    "not_an_object": "the JSON is not an object",
    "unsupported_schema_version": "`schema_version` is not one this worker reads",
    "unknown_field": "a field the contract does not define",
    "missing_field": "a required field is absent",
    "wrong_type": "a field has the wrong JSON type (a kombu type marker included)",
    "invalid_id": "an id is empty, over 128 characters or holds control characters",
    "invalid_text": "an annulment's `reason` holds U+0000 or a lone surrogate",
    "invalid_ladder": "the ladder name is not a valid name",
    "invalid_timestamp": "`finished_at` is not an RFC 3339 date-time",
    "naive_timestamp": "`finished_at` carries no timezone",
    "timestamp_out_of_range": "`finished_at` is more than a day in the future or out of range",
    "empty_side": "a side has no players",
    "too_many_players": "a side has more than 8 players",
    "count_out_of_range": "a Sedma count is outside 0 to 1000",
    "invalid_outcome": "`outcome` is not `side_a_won`, `side_b_won` or `draw`",
    "duplicate_player": "a player appears twice in the match",
    "mixed_forms": "both `side_a`/`side_b` and `sides` are given",
    "schema_violation": "another rule of the JSON Schema is broken",
    "bad_task_arguments": "the task was called with other arguments than one message",
    "unknown_ladder": "the ladder is not in the ladders file",
    "unsupported_match_shape": "the ladder does not rate this shape (for example 1v8)",
    "internal_error": "an unexpected error while rating; the detail holds the exception",
    "annulment_refused": "the ladder is in arrival order or not configured",
    "unknown_match": "an annulment names matches not applied yet (the others are annulled)",
    "uneven_sides": "the ladder's policy rejects sides of different sizes",
    "unsupported_match": "the ladder's policy cannot rate this match (placements, margin of victory)",
    "too_few_sides": "a match with fewer than two sides",
    "missing_score": "the ladder's margin-of-victory policy needs the match's `score`",
    "conflicting_duplicate": "a `match_id` already applied with a different payload",
    "undecodable_body": "the Celery message body cannot be decoded",
    "content_type_refused": "a content type other than `application/json` (pickle, ...); never deserialised",
    "invalid_task_message": "Celery refused the task message as invalid",
    "unknown_task": "a task name the worker does not run",
    "not_a_task_message": "a body that is not a Celery task message (a bare match pushed on the list)",
    "malformed_task_message": "a task message Celery cannot read (headers or body malformed)",
}
"""What each reason code means to the producer reading the dead letter. A unit test fails when a
code found in the source has no entry here, or an entry names no code of the source."""


def render_reason_codes() -> str:
    """The reason codes table: code, module giving it, meaning."""
    lines = ["| reason code | given by | meaning |", "|---|---|---|"]
    lines += [f"| `{r.code}` | `{r.module}` | {_cell(REASON_MEANINGS.get(r.code, ''))} |" for r in reason_codes()]
    return "\n".join(lines) + "\n"


# --- metrics -----------------------------------------------------------------------------------


def metric_rows() -> list[MetricInfo]:
    """Every ``ratings_*`` metric the worker and the relay serve
    (:func:`worker.service.observability.metric_catalogue`)."""
    from worker.service.observability import metric_catalogue

    return metric_catalogue()


def render_metrics() -> str:
    """The metrics table: name, type, labels, help text, which processes record it."""
    lines = ["| metric | type | labels | help | recorded by |", "|---|---|---|---|---|"]
    lines += [f"| `{m.name}` | {m.type} | {', '.join(f'`{label}`' for label in m.labels) or '–'} | "
              f"{_cell(m.help)} | {m.recorded_by} |" for m in metric_rows()]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[], str]] = {
    "cli": render_cli,
    "settings": render_settings,
    "reason-codes": render_reason_codes,
    "metrics": render_metrics,
}
"""Marker name -> the function generating its Markdown."""


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- reference:NAME -->`` marker replaced by its generated block;
    an unknown NAME raises ``KeyError`` naming it (so ``mkdocs build`` fails)."""
    return MARKER.sub(lambda m: RENDERERS[m.group(1)](), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook (``hooks:`` in ``mkdocs.yml``): expand the markers of every page."""
    return expand(markdown)
