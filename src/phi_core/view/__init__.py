"""``phi view``: the web view of the run log, the router state and selection results.

Owns the read-only data layer (:class:`ViewData`: runs searched and paginated, one race side by
side, router arms and decisions per namespace, selections with an SVG Pareto chart), the
Starlette app with its JSON API, and the page's assets in ``static/`` (shipped in the package:
no CDN, it works offline). Sits above ``runlog/``, ``routing/`` and ``select/``, which it only
reads; ``cli/view.py`` wires it to the command line. Needs the ``server`` extra.
"""

from ._app import (
    DEFAULT_PORT,
    LOOPBACK_HOSTS,
    STATIC_DIR,
    ViewServer,
    create_app,
    is_loopback,
    serve,
)
from ._data import MAX_PAGE, ViewData, run_query
from ._svg import Series, scatter_svg

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK_HOSTS",
    "MAX_PAGE",
    "STATIC_DIR",
    "Series",
    "ViewData",
    "ViewServer",
    "create_app",
    "is_loopback",
    "run_query",
    "scatter_svg",
    "serve",
]
