"""Tornado handlers: the history page, its JSON API and the plotly.js it draws with.

Every route goes through the Jupyter server's own login (``@web.authenticated``) and authorizer
(``@authorized`` on the "keras_nbguard" resource): no route answers without the server's token or
cookie. Each request reads the database afresh (read-only), so the page is as new as the last
write of any kernel; a missing or unreadable file is a message, never a 500. Reading and
rendering run on a worker thread, never on the server's event loop, which serves every kernel's
messages.
"""

from __future__ import annotations

import asyncio
import json
from functools import cache
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from keras_nbguard.server.history import (
    StoredRun,
    Unreadable,
    by_notebook,
    notebook_summary,
    read_runs,
)
from keras_nbguard.server.page import render

RESOURCE = "keras_nbguard"
SETTING = "keras_nbguard_db"  # web_app.settings key: a callable giving the database path


class HistoryMixin:
    """What the page and the API share: where the database is and reading it without raising."""

    auth_resource = RESOURCE
    settings: dict[str, Any]
    log: Any

    @property
    def db_path(self) -> str:
        return str(self.settings[SETTING]())

    def read(
        self, notebook: str | None = None, samples: bool = False
    ) -> tuple[list[StoredRun], str | None]:
        """The runs and, when they could not be read, why (the page shows it)."""
        try:
            return read_runs(self.db_path, notebook, samples=samples), None
        except Unreadable as exc:
            return [], str(exc)
        except Exception as exc:  # a bug of ours must not take the page down
            self.log.exception("keras_nbguard: reading the run history failed")
            return [], f"The run history could not be read ({type(exc).__name__}: {exc})."


class PageHandler(HistoryMixin, JupyterHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        plotly = url_path_join(self.base_url, "keras-nbguard", "static", "plotly.min.js")
        self.set_header("Cache-Control", "no-store")
        self.finish(await asyncio.to_thread(self._page, f"{plotly}?v={plotly_version()}"))

    def _page(self, plotly_url: str) -> str:
        runs, message = self.read()
        return render(by_notebook(runs), db=self.db_path, message=message, plotly_url=plotly_url)


class NotebooksHandler(HistoryMixin, APIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(await asyncio.to_thread(self._notebooks))

    def _notebooks(self) -> str:
        runs, message = self.read()
        notebooks = [notebook_summary(name, group) for name, group in by_notebook(runs).items()]
        return json.dumps({"db": self.db_path, "message": message, "notebooks": notebooks})


class RunsHandler(HistoryMixin, APIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        notebook = self.get_query_argument("notebook", None)  # None: every notebook
        samples = self.get_query_argument("samples", "0") not in ("0", "", "false")
        self.finish(await asyncio.to_thread(self._runs, notebook, samples))

    def _runs(self, notebook: str | None, samples: bool) -> str:
        runs, message = self.read(notebook, samples)
        return json.dumps(
            {
                "db": self.db_path,
                "message": message,
                "notebook": notebook,
                "runs": [r.to_dict(samples) for r in runs],
            }
        )


class PlotlyHandler(HistoryMixin, JupyterHandler):
    """plotly.js from the installed plotly package: the page works offline, no CDN."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.set_header("Content-Type", "application/javascript; charset=utf-8")
        # the URL carries plotly's version, so a browser may keep it
        self.set_header("Cache-Control", "private, max-age=604800")
        self.finish(await asyncio.to_thread(plotly_js))


@cache
def plotly_js() -> bytes:
    """The file plotly ships, read as it is: importing plotly.offline would take the server
    seconds (plotly.io → nbformat → jsonschema) before the first dashboard could draw."""
    from keras_nbguard.board.plotting import plotly_js_path

    path = plotly_js_path()
    if path is None:
        raise web.HTTPError(404, "plotly is not installed")
    with open(path, "rb") as file:
        return file.read()


@cache
def plotly_version() -> str:
    from keras_nbguard.board.plotting import plotly_tag

    return plotly_tag()


def routes(base_url: str) -> list[tuple[str, type[web.RequestHandler]]]:
    def at(*parts: str) -> str:
        return url_path_join(base_url, "keras-nbguard", *parts)

    return [
        (at("?"), PageHandler),  # with or without the trailing slash
        (at("api", "notebooks"), NotebooksHandler),
        (at("api", "runs"), RunsHandler),
        (at("static", "plotly.min.js"), PlotlyHandler),
    ]
