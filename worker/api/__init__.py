"""The read API (``ratings api``): ladders, players, leaderboards, histories and match status over
HTTP, read-only, with a leaderboard page served by the same process.

:mod:`worker.api.app` builds the ASGI application from the settings and a read-only pool
(:func:`worker.store.pool.open_read_pool`); :mod:`worker.api.routes` holds the ``/v1`` endpoints,
:mod:`worker.api.page` the HTML pages, :mod:`worker.api.models` the response shapes (the OpenAPI
document, ``schemas/openapi/ratings-api.json``), :mod:`worker.api.problems` the RFC 9457 errors.
"""
