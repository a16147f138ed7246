"""The ``ratings`` command line (Typer): the app, every command group registered in help order, the entry point."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

# Not on a terminal (a pipe, a log, CI): rich would wrap tables and help at 80 columns.
if not sys.stdout.isatty():
    os.environ.setdefault("COLUMNS", "200")
    os.environ.setdefault("TERMINAL_WIDTH", "200")

import typer  # noqa: E402
from typer.core import TyperOption  # noqa: E402

from worker.broker_durability import EvictingBroker  # noqa: E402
from worker.cli import dead_letters, dev, evaluate, importer, ladders, matches, service  # noqa: E402
from worker.cli.common import err  # noqa: E402
from worker.cli.events import events_app, outbox_app  # noqa: E402
from worker.cli.policy import check_published_command, policy_app  # noqa: E402
from worker.extras import MissingExtra  # noqa: E402
from worker.store.connection import DatabaseUnreachable  # noqa: E402

app = typer.Typer(
    help="Match rating worker: rate finished matches exactly once.", no_args_is_help=True,
    pretty_exceptions_enable=False, rich_markup_mode="markdown",
)

_display_type_rich = TyperOption.display_type_rich


def _no_flag_type(self: TyperOption, ctx):  # a flag takes no value: no `<bool>` label in the help
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _no_flag_type  # type: ignore[method-assign]

# Registration order is the order of `ratings --help`.
app.command()(service.migrate)
app.command()(service.worker)
app.command()(service.relay)
app.command()(service.api)
app.command()(matches.publish)
app.command("import-football")(matches.import_football)
app.command()(matches.generate)
app.command()(ladders.leaderboard)
app.command()(ladders.history)
app.command()(ladders.verify)
app.command()(evaluate.evaluate)
app.command()(ladders.export)
app.command()(ladders.rebuild)
app.command()(ladders.rebuilds)
app.command()(ladders.annul)
app.add_typer(dead_letters.dead_letters_app, name="dead-letters")
app.add_typer(policy_app, name="policy")
app.add_typer(events_app, name="events")
app.add_typer(outbox_app, name="outbox")
app.command("import")(importer.import_log)
app.command("check-published")(check_published_command)
app.command()(service.doctor)
app.command()(dev.demo)
app.command()(dev.bench)


def _settings_reason(error: Mapping[str, Any]) -> str:
    """One settings error as the CLI prints it: the message, led by the variable it is about
    (``RATINGS_BROKER_URL: ...``) unless the message names it already."""
    message = str(error["msg"]).removeprefix("Value error, ")
    loc = error.get("loc") or ()
    variable = f"RATINGS_{str(loc[0]).upper()}" if loc else ""
    return message if not variable or message.startswith(variable) else f"{variable}: {message}"


def main() -> None:
    """Console-script entry point: the CLI, with expected failures as one-line messages (exit 2)."""
    import kombu.exceptions
    import pydantic
    import redis

    try:
        app(prog_name="ratings")
    except DatabaseUnreachable as exc:
        err.print(f"[red]database unreachable[/red]: {str(exc).strip().splitlines()[0]} (check RATINGS_DATABASE_URL)")
        raise SystemExit(2) from None
    except redis.ConnectionError as exc:
        err.print(f"[red]Redis unreachable[/red]: {exc} (check RATINGS_BROKER_URL, or RATINGS_EVENTS_REDIS_URL "
                  "when the broker is RabbitMQ)")
        raise SystemExit(2) from None
    except kombu.exceptions.OperationalError as exc:
        err.print(f"[red]broker unreachable[/red]: {exc} (check RATINGS_BROKER_URL)")
        raise SystemExit(2) from None
    except pydantic.ValidationError as exc:
        from rich.markup import escape

        if exc.title != "Settings":  # not the environment's fault: a contract this code broke (a bug)
            err.print(f"[red]internal error[/red]: {escape(str(exc))}")
            raise SystemExit(1) from None
        reasons = "; ".join(_settings_reason(e) for e in exc.errors())
        err.print(f"[red]invalid settings[/red]: {escape(reasons)}")
        raise SystemExit(2) from None
    except EvictingBroker as exc:
        err.print(f"[red]broker refused[/red]: {exc}")
        raise SystemExit(2) from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        err.print(f"[red]cannot read {exc.filename}[/red]: {exc.strerror}")
        raise SystemExit(2) from None
    except MissingExtra as exc:
        from rich.markup import escape

        err.print(f"[red]missing optional dependency[/red]: {escape(str(exc))}")
        raise SystemExit(2) from None
    except ValueError as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise SystemExit(2) from None


if __name__ == "__main__":  # pragma: no cover
    main()
