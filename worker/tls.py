"""TLS certificate refusals, told apart from an unreachable server, with what to change.

A server whose certificate does not match the host in the URL, or is not signed by the CA the URL
trusts, fails every connection the same way: retrying cannot help, so the worker, the relay and the
producer refuse at start with one line naming the setting, a reason code and the fix, instead of
waiting for ever as for a server that is down. Standard library only (the producer's light install
uses it).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

MISMATCH = "tls_certificate_mismatch"
UNTRUSTED = "tls_certificate_untrusted"
CA_FILE_UNREADABLE = "tls_ca_file_unreadable"

_MISMATCH_TEXT = ("does not match host name", "hostname mismatch", "ip address mismatch", "not valid for")
_UNTRUSTED_TEXT = ("certificate verify failed", "self-signed certificate", "unable to get local issuer",
                   "root certificate file", "self signed certificate")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += [e.__cause__, e.__context__]


def tls_reason(exc: BaseException) -> str | None:
    """:data:`MISMATCH` or :data:`UNTRUSTED` when ``exc`` (or an exception in its chain) is a refused
    server certificate (Python's ``ssl`` as redis-py and kombu raise it, or libpq's message as
    psycopg raises it); None for anything else (a server down, a refused password)."""
    for e in _chain(exc):
        text = str(e).lower()
        if isinstance(e, ssl.SSLCertVerificationError) and e.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
            return MISMATCH
        if any(t in text for t in _MISMATCH_TEXT) and ("certificate" in text or "host" in text):
            return MISMATCH
        if isinstance(e, ssl.SSLCertVerificationError) or any(t in text for t in _UNTRUSTED_TEXT):
            return UNTRUSTED
    return None


def tls_refusal(exc: BaseException, setting: str) -> str | None:
    """One line for an operator when ``exc`` is a refused server certificate (:func:`tls_reason`):
    the setting (``RATINGS_BROKER_URL``), the reason code, what to change, and the library's own
    words; None when it is not one."""
    reason = tls_reason(exc)
    if reason is None:
        return None
    if reason == MISMATCH:
        fix = ("the server's certificate does not name the host in the URL: put a host name the certificate "
               "names (its subjectAltName) in the URL, or have the certificate reissued with this host in it")
    else:
        fix = ("the server's certificate is not signed by the CA the URL trusts: point the URL at the CA that "
               "signed it (PostgreSQL: sslrootcert=, Redis: ssl_ca_certs=, RabbitMQ: RATINGS_BROKER_CA_FILE)")
    return f"{setting}: TLS certificate refused ({reason}): {fix} ({type(exc).__name__}: {str(exc).strip()[:300]})"


def unreadable_ca_file(url: str | None, ca_file: str | None = None) -> str | None:
    """The first CA file that cannot be read among ``ca_file`` and the ``ssl_ca_certs=`` of the
    Redis URL ``url`` (each ``;``-separated part); None when none is named or each one reads.

    A missing CA file fails every TLS connection the same way, as ``[Errno 2] No such file or
    directory`` (as if the server's address were a missing socket) or as an untrusted certificate:
    retrying cannot help, so it is refused at start (:func:`ca_file_refusal`)."""
    paths = [ca_file] if ca_file else []
    for part in (url or "").split(";"):
        paths += parse_qs(urlsplit(part.strip()).query).get("ssl_ca_certs", [])
    for path in paths:
        try:
            with open(path, "rb"):
                pass
        except OSError:
            return path
    return None


def ca_file_refusal(path: str, setting: str) -> str:
    """One line for an operator: the CA file ``path`` named by ``setting`` cannot be read, the reason
    code :data:`CA_FILE_UNREADABLE` and what to change."""
    return (f"{setting}: the CA file {path!r} cannot be read ({CA_FILE_UNREADABLE}): name the PEM file of the "
            "CA that signed the server's certificate, readable by this process")
