"""The read API's ASGI application: routes, bearer tokens, problem details, metrics and health.

Built by :func:`create_app` from the settings and an open read-only pool; ``ratings api`` serves it
with uvicorn (:func:`worker.bootstrap.build_api`).
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from worker.api import models, routes
from worker.api.problems import PROBLEM_MEDIA_TYPE, ProblemError, problem_response
from worker.settings import Settings
from worker.store import api_reads
from worker.store.connection import DatabaseError, DatabaseUnreachable

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

API_VERSION = "1.0.0"
"""Version of the HTTP contract (``info.version`` of the OpenAPI document)."""

DESCRIPTION = """Read-only HTTP API of the match rating worker: ladders and the policy in force, player
states (one, or up to 1,000 at once), leaderboard pages with a keyset cursor, rating histories with
corrections marked, and what became of a match. Ratings in rating points, scores in [0, 1], times
ISO 8601 in UTC. Errors are RFC 9457 problem details with the CLI's reason codes (`code`).
When the service is configured with tokens, `/v1/` asks for `Authorization: Bearer TOKEN`."""

bearer = HTTPBearer(auto_error=False, description="A token of RATINGS_API_TOKENS (when any is configured).")


def _require_token(request: Request,
                   credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    tokens: frozenset[str] = request.app.state.tokens
    if not tokens:
        return
    given = credentials.credentials if credentials is not None else ""
    if not any(hmac.compare_digest(given.encode(), t.encode()) for t in tokens):
        raise ProblemError(401, "unauthorized", "Unauthorized",
                           "send a configured token as `Authorization: Bearer TOKEN`",
                           headers={"WWW-Authenticate": "Bearer"})


class Metrics:
    """The API's Prometheus metrics (a registry of its own): requests by route template, method and
    status, and their latency in seconds."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ratings_api_requests", "Requests answered, by route, method and status.",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("ratings_api_request_seconds", "Time to answer a request, in seconds, by route.",
                                 ["route"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


def create_app(settings: Settings, pool: ConnectionPool | None) -> FastAPI:
    """The API for ``settings`` reading through ``pool`` (a :func:`worker.store.pool.open_read_pool`;
    ``None`` only to render the OpenAPI document, which opens no connection)."""
    app = FastAPI(title="Match rating worker: read API", version=API_VERSION, description=DESCRIPTION,
                  docs_url=None, redoc_url=None)  # their pages load scripts from a CDN; /openapi.json stays
    app.state.pool = pool
    app.state.tokens = settings.api_token_set
    metrics = Metrics()

    app.include_router(routes.router, dependencies=[Depends(_require_token)])
    if settings.api_page:
        from worker.api.page import router as page_router

        app.include_router(page_router)

    @app.get("/health", response_model=models.Health, tags=["operations"],
             responses={503: {"model": models.Health, "description": "The database does not answer."}})
    def health(request: Request) -> JSONResponse:
        """``ok`` (200) when the database answers ``SELECT 1``, else ``unavailable`` (503) with the error's class."""
        try:
            with request.app.state.pool.connection(timeout=5) as conn:
                api_reads.read_only_probe(conn)
                conn.rollback()
        except DatabaseError as exc:
            return JSONResponse({"status": "unavailable", "database": type(exc).__name__}, status_code=503)
        return JSONResponse({"status": "ok", "database": "ok"})

    @app.get("/metrics", tags=["operations"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format."}})
    def prometheus() -> Response:
        """Prometheus metrics of this process (requests, latency)."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.middleware("http")
    async def measure(request: Request, call_next):
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        label = getattr(route, "path", "unmatched")
        metrics.requests.labels(label, request.method, str(response.status_code)).inc()
        metrics.latency.labels(label).observe(time.perf_counter() - start)
        return response

    @app.exception_handler(ProblemError)
    def _problem(request: Request, exc: ProblemError) -> Response:
        return problem_response(exc.status, exc.code, exc.title, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> Response:
        reasons = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        return problem_response(422, "invalid_request", "Invalid request", reasons)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> Response:
        # 400: a body that is not JSON at all (FastAPI answers it before validation)
        code = {400: "invalid_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem_response(exc.status_code, code, str(exc.detail), f"{request.method} {request.url.path}: "
                                f"{exc.detail}", dict(exc.headers or {}))

    @app.exception_handler(DatabaseUnreachable)
    def _database(request: Request, exc: DatabaseError) -> Response:
        return problem_response(503, "database_unavailable", "Database unavailable",
                                f"the database did not answer ({type(exc).__name__}); try again shortly",
                                {"Retry-After": "5"})

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict:
    """FastAPI's document with the errors as this API sends them: each problem response only as
    ``application/problem+json``, the 422 FastAPI describes as its own validation error shape as a
    problem too (:func:`_invalid` answers it so), and the bearer token optional (asked only when
    ``RATINGS_API_TOKENS`` is set)."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        problem = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for item in doc["paths"].values():
            for operation in item.values():
                if "security" in operation:  # tokens are a deployment's choice: none asked when none configured
                    operation["security"] = [*operation["security"], {}]
                for status, response in operation.get("responses", {}).items():
                    if PROBLEM_MEDIA_TYPE in response.get("content", {}) or status == "422":
                        response["content"] = problem
                        response["description"] = "Problem details (RFC 9457)"
        schemas = doc["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = doc
    return app.openapi_schema
