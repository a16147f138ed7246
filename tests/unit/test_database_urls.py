"""PostgreSQL URLs changed through libpq's parser (``worker.store.urls``): every parameter survives."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from worker.store.urls import to_url, url_with

EMBEDDED = "postgresql://postgres:@/postgres?host=/tmp/pytest-of-root/pytest-3/servers0/postgres"


def test_a_socket_host_in_the_query_survives_a_change_of_database():
    """The embedded server's URL names its socket folder in ``host=``: a new database name keeps it."""
    url = url_with(EMBEDDED, dbname="ratings_mig_1")
    assert conninfo_to_dict(url) == {"user": "postgres", "dbname": "ratings_mig_1",
                                     "host": "/tmp/pytest-of-root/pytest-3/servers0/postgres"}


def test_a_tcp_url_keeps_user_password_host_port_and_options():
    """Host and port move to a PgBouncer's; user, password, database and sslmode stay."""
    url = url_with("postgresql://amy:s%40cret@db.example:5433/ratings?sslmode=require", host="127.0.0.1", port=6432)
    assert url == "postgresql://amy:s%40cret@127.0.0.1:6432/ratings?sslmode=require"
    assert conninfo_to_dict(url) == {"user": "amy", "password": "s@cret", "host": "127.0.0.1", "port": "6432",
                                     "dbname": "ratings", "sslmode": "require"}


def test_a_parameter_given_as_none_is_removed():
    """``password=None`` drops the password (a role that logs in without one)."""
    assert conninfo_to_dict(url_with("postgresql://amy:pw@h/db", password=None, user="bea")) == {
        "user": "bea", "host": "h", "dbname": "db"}


_text = st.text(string.ascii_letters + string.digits + " @:/?#&=%+,._-", min_size=1, max_size=12)
_host = st.one_of(st.from_regex(r"\A[a-z][a-z0-9.-]{0,15}\Z"), st.just("::1"),
                  st.builds(lambda p: "/" + p.strip("/"), _text))


@given(user=_text, password=st.one_of(st.none(), _text), host=_host, port=st.integers(1, 65535), dbname=_text,
       application_name=st.one_of(st.none(), _text))
def test_libpq_reads_back_exactly_the_parameters_written(user, password, host, port, dbname, application_name):
    """Any user, password, host (name, IPv6 address or socket folder), port, database and extra
    parameter, written as a URL, parse back through libpq to the same parameters."""
    params = {"user": user, "host": host, "port": str(port), "dbname": dbname}
    if password:
        params["password"] = password
    if application_name:
        params["application_name"] = application_name
    assert conninfo_to_dict(to_url(params)) == params
