"""The read API's OpenAPI 3.1 document, as committed at ``schemas/openapi/ratings-api.json``.

Regenerate it after changing an endpoint or a model: ``python -m worker.api.openapi`` (from the
repository root; writes the file) and commit it; ``tests/unit/test_api_openapi.py`` fails while the
committed document differs from what the code serves.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from worker.api.app import create_app
from worker.settings import Settings

DOCUMENT = Path("schemas/openapi/ratings-api.json")
"""The committed document's path, relative to the repository root."""


def openapi_text() -> str:
    """The document the API serves at ``/openapi.json``, as indented JSON text (no connection opened)."""
    app = create_app(Settings(api_tokens=None, api_page=True), None)
    return json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write the document to the path given (default :data:`DOCUMENT`)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DOCUMENT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(openapi_text(), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
