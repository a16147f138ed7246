"""Store: PostgreSQL URLs changed through libpq's own parser, never by string surgery.

A URL may name its server in the authority (``postgresql://user@host:5432/db``) or in a ``host=``
query parameter (a Unix socket folder: ``postgresql://postgres:@/postgres?host=/run/pg``, what the
embedded server hands out). Splitting on ``/`` or replacing the authority keeps or breaks such a
parameter by accident; parsing with ``psycopg.conninfo`` and writing every parameter back does not.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

_AUTHORITY = ("user", "password", "host", "port", "dbname")


def conninfo_params(database_url: str) -> dict[str, str]:
    """The libpq connection parameters of ``database_url`` (keyword to value: ``user``, ``host``,
    ``port``, ``dbname``, ...), as libpq itself reads them. Raises ``psycopg.ProgrammingError`` when
    it is not a valid URL or key/value connection string."""
    return {k: str(v) for k, v in conninfo_to_dict(database_url).items() if v is not None}


def url_with(database_url: str, **params: str | int | None) -> str:
    """``database_url`` with libpq connection parameters replaced (``dbname``, ``user``, ``host``,
    ``port``, ``password``, or any other libpq keyword); a parameter given as None is removed.

    Returns a ``postgresql://`` URL (the settings accept URLs only) that libpq reads as the same
    parameters: a TCP host goes in the authority, a socket folder (a host starting with ``/``) and
    every other parameter in the query string. Raises ``psycopg.ProgrammingError`` when
    ``database_url`` is not a valid URL or key/value connection string.
    """
    info = conninfo_params(database_url)
    for key, value in params.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = str(value)
    return to_url(info)


def to_url(params: dict[str, str]) -> str:
    """A ``postgresql://`` URL carrying exactly the libpq connection ``params`` (keyword to value)."""
    query = {k: v for k, v in params.items() if k not in _AUTHORITY}
    host = params.get("host", "")
    netloc = ""
    if host.startswith("/") or "," in host:  # a socket folder or a host list: libpq reads them from the query
        query["host"] = host
        if "port" in params:
            query["port"] = params["port"]
    else:
        netloc = f"[{host}]" if ":" in host else quote(host, safe="")
        if "port" in params:
            netloc += f":{params['port']}"
    if "user" in params:
        userinfo = quote(params["user"], safe="")
        if params.get("password"):
            userinfo += ":" + quote(params["password"], safe="")
        netloc = f"{userinfo}@{netloc}"
    elif params.get("password"):
        query["password"] = params["password"]
    path = "/" + quote(params["dbname"], safe="") if "dbname" in params else "/"
    # libpq decodes %XX but not "+" as a space (RFC 3986, not HTML forms): quote_via=quote
    return f"postgresql://{netloc}{path}" + (f"?{urlencode(query, safe='/', quote_via=quote)}" if query else "")
