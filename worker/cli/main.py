"""The ``ratings`` command line (Typer): the app, every command group registered in help order, the entry point."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Annotated, Any, Optional

# Not on a terminal (a pipe, a log, CI): rich would wrap tables and help at 80 columns.
if not sys.stdout.isatty():
    os.environ.setdefault("COLUMNS", "200")
    os.environ.setdefault("TERMINAL_WIDTH", "200")

import typer  # noqa: E402
from typer.core import TyperOption  # noqa: E402

from worker.broker_durability import EvictingBroker  # noqa: E402
from worker.cli import dead_letters, dev, evaluate, importer, ladders, matches, models, service  # noqa: E402
from worker.cli.common import ExitCode, err  # noqa: E402
from worker.cli.events import events_app, outbox_app  # noqa: E402
from worker.cli.policy import check_published_command, policy_app  # noqa: E402
from worker.extras import MissingExtra  # noqa: E402
from worker.redis_url import InvalidSentinelUrl  # noqa: E402
from worker.settings import SettingNotSet  # noqa: E402
from worker.store.connection import DatabaseUnreachable  # noqa: E402

app = typer.Typer(
    help="Match rating worker: rate finished matches exactly once.\n\nExit codes: 0 ok; 1 a check failed or "
         "findings; 2 usage error (change the command); 3 environment not ready (settings, servers, schema, "
         "ladders file: change the environment).", no_args_is_help=True,
    pretty_exceptions_enable=False, rich_markup_mode="markdown",
)

_display_type_rich = TyperOption.display_type_rich


def _no_flag_type(self: TyperOption, ctx):  # a flag takes no value: no `<bool>` label in the help
    return None if self.is_flag else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _no_flag_type  # type: ignore[method-assign]

SERVICE = "Service: run it"
OPERATIONS = "Operations: check, repair, replay"
LADDERS = "Ladders and organisers: ratings, policies, match logs"
DEVELOPMENT = "Development and evaluation"


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ratings {version('match-rating-worker')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the installed version and exit.")] = None,
) -> None:
    """The options of ``ratings`` itself (the app's help text is the Typer app's)."""


# Registration order within a panel is the order of `ratings --help`; panels, by who uses them,
# appear in the order of their first command.
app.command(rich_help_panel=SERVICE)(service.migrate)
app.command(rich_help_panel=SERVICE)(service.worker)
app.command(rich_help_panel=SERVICE)(service.relay)
app.command(rich_help_panel=SERVICE)(service.api)
app.command(rich_help_panel=OPERATIONS)(service.doctor)
app.command(rich_help_panel=OPERATIONS)(ladders.verify)
app.add_typer(dead_letters.dead_letters_app, name="dead-letters", rich_help_panel=OPERATIONS)
app.command(rich_help_panel=OPERATIONS)(matches.publish)
app.command(rich_help_panel=OPERATIONS)(ladders.rebuild)
app.command(rich_help_panel=OPERATIONS)(ladders.rebuilds)
app.add_typer(events_app, name="events", rich_help_panel=OPERATIONS)
app.add_typer(outbox_app, name="outbox", rich_help_panel=OPERATIONS)
app.command(rich_help_panel=LADDERS)(ladders.leaderboard)
app.command(rich_help_panel=LADDERS)(models.predict)
app.command(rich_help_panel=LADDERS)(ladders.history)
app.command(rich_help_panel=LADDERS)(ladders.export)
app.command("import", rich_help_panel=LADDERS)(importer.import_log)
app.command(rich_help_panel=LADDERS)(ladders.annul)
app.add_typer(policy_app, name="policy", rich_help_panel=LADDERS)
app.command(rich_help_panel=DEVELOPMENT)(evaluate.evaluate)
app.command("check-published", rich_help_panel=DEVELOPMENT)(check_published_command)
app.command(rich_help_panel=DEVELOPMENT)(matches.generate)
app.command("import-football", rich_help_panel=DEVELOPMENT)(matches.import_football)
app.command(rich_help_panel=DEVELOPMENT)(dev.demo)
app.command(rich_help_panel=DEVELOPMENT)(dev.bench)


def _settings_reason(error: Mapping[str, Any]) -> str:
    """One settings error as the CLI prints it: the message, led by the variable it is about
    (``RATINGS_BROKER_URL: ...``) unless the message names it already."""
    message = str(error["msg"]).removeprefix("Value error, ")
    loc = error.get("loc") or ()
    variable = f"RATINGS_{str(loc[0]).upper()}" if loc else ""
    return message if not variable or message.startswith(variable) else f"{variable}: {message}"


def main() -> None:
    """Console-script entry point: the CLI, with expected failures as one-line messages: exit 3
    (:attr:`ExitCode.NOT_READY`) for the environment (servers, settings, optional packages), 2 for
    a file or value named on the command line."""
    import kombu.exceptions
    import pydantic
    import redis

    try:
        app(prog_name="ratings")
    except DatabaseUnreachable as exc:
        err.print(f"[red]database unreachable[/red]: {str(exc).strip().splitlines()[0]} (check RATINGS_DATABASE_URL)")
        raise SystemExit(ExitCode.NOT_READY) from None
    except redis.ConnectionError as exc:
        err.print(f"[red]Redis unreachable[/red]: {exc} (check RATINGS_BROKER_URL, or RATINGS_EVENTS_REDIS_URL "
                  "when the broker is RabbitMQ)")
        raise SystemExit(ExitCode.NOT_READY) from None
    except kombu.exceptions.OperationalError as exc:
        err.print(f"[red]broker unreachable[/red]: {exc} (check RATINGS_BROKER_URL)")
        raise SystemExit(ExitCode.NOT_READY) from None
    except pydantic.ValidationError as exc:
        from rich.markup import escape

        if exc.title != "Settings":  # not the environment's fault: a contract this code broke (a bug)
            err.print(f"[red]internal error[/red]: {escape(str(exc))}")
            raise SystemExit(1) from None  # as any uncaught exception: Python's own status
        reasons = "; ".join(_settings_reason(e) for e in exc.errors())
        err.print(f"[red]invalid settings[/red]: {escape(reasons)}")
        raise SystemExit(ExitCode.NOT_READY) from None
    except EvictingBroker as exc:
        err.print(f"[red]broker refused[/red]: {exc}")
        raise SystemExit(ExitCode.NOT_READY) from None
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        err.print(f"[red]cannot read {exc.filename}[/red]: {exc.strerror}")
        raise SystemExit(ExitCode.USAGE) from None
    except MissingExtra as exc:
        from rich.markup import escape

        err.print(f"[red]missing optional dependency[/red]: {escape(str(exc))}")
        raise SystemExit(ExitCode.NOT_READY) from None
    except (SettingNotSet, InvalidSentinelUrl) as exc:  # a setting the command needs, missing or unusable
        from rich.markup import escape

        err.print(f"[red]invalid settings[/red]: {escape(str(exc))}")
        raise SystemExit(ExitCode.NOT_READY) from None
    except ValueError as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise SystemExit(ExitCode.USAGE) from None


if __name__ == "__main__":  # pragma: no cover
    main()
