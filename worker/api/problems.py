"""RFC 9457 problem details (``application/problem+json``) with the CLI's reason codes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from starlette.responses import JSONResponse

PROBLEM_TYPE = "tag:match-rating-worker,2026:problem:"
"""Prefix of every problem's ``type`` (a tag URI: it names the problem, it is not a page to fetch);
the reason code follows it."""

PROBLEM_MEDIA_TYPE = "application/problem+json"


class Problem(BaseModel):
    """An error, as RFC 9457 problem details: ``type`` (a URI naming the problem), ``title``,
    ``status`` (the HTTP status), ``detail`` (what happened and what to change) and the extension
    ``code``, the reason code the CLI prints for the same fault (``unknown_ladder``, ``unknown_match``...)."""

    type: str = Field(examples=[PROBLEM_TYPE + "unknown_ladder"])
    title: str
    status: int
    detail: str
    code: str = Field(description="Reason code (the CLI's for the same fault).")


class ProblemError(Exception):
    """Raised by a handler to answer with a problem: HTTP ``status``, reason ``code``, ``title`` and ``detail``."""

    def __init__(self, status: int, code: str, title: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.code, self.title, self.detail, self.headers = status, code, title, detail, headers


def problem_response(status: int, code: str, title: str, detail: str,
                     headers: dict[str, str] | None = None) -> JSONResponse:
    """The problem as a response with media type ``application/problem+json``."""
    body: dict[str, Any] = Problem(type=PROBLEM_TYPE + code, title=title, status=status, detail=detail,
                                   code=code).model_dump()
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of problems with these statuses."""
    schema = {"$ref": "#/components/schemas/Problem"}
    return {status: {"model": Problem, "content": {PROBLEM_MEDIA_TYPE: {"schema": schema}},
                     "description": "Problem details (RFC 9457)"} for status in statuses}
