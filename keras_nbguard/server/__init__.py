"""Jupyter server extension: the run history page at ``{base_url}keras-nbguard/``.

Enabled by ``jupyter-config/jupyter_server_config.d/keras_nbguard.json`` (installed with the
package). Routes, all behind the server's own login:

- ``keras-nbguard/``: notebooks and their runs across kernels, with the across-runs plots;
- ``keras-nbguard/api/notebooks``: one summary per notebook (JSON);
- ``keras-nbguard/api/runs?notebook=PATH``: the notebook's runs as records (JSON; all notebooks
  without ``notebook``; ``&samples=1`` adds the RSS series).

The database is the one kernels write: ``KerasNbguard.db_path`` if configured, else
``$KERAS_NBGUARD_DB``, else the Jupyter data dir's ``keras_nbguard/runs.sqlite``. Only imported by
a Jupyter server: importing ``keras_nbguard`` never loads it.
"""

from __future__ import annotations

from typing import Any

from traitlets import Unicode
from traitlets.config import Configurable


class KerasNbguard(Configurable):
    """Options of the history page (``--KerasNbguard.db_path=...`` or a jupyter_server_config)."""

    db_path = Unicode(
        "",
        config=True,
        help="Run history database the page reads. Default: $KERAS_NBGUARD_DB, else "
        "<jupyter data dir>/keras_nbguard/runs.sqlite (where kernels write by default).",
    )

    def database(self) -> str:
        from keras_nbguard.store.history_db import default_path

        return self.db_path or default_path()  # the env is read per request, like kernels do


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "keras_nbguard.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from keras_nbguard.server.handlers import SETTING, routes

    options = KerasNbguard(parent=serverapp)
    web_app = serverapp.web_app
    web_app.settings[SETTING] = options.database
    web_app.add_handlers(".*$", routes(web_app.settings["base_url"]))
    serverapp.log.info(
        "keras_nbguard: run history at %skeras-nbguard/ (database %s)",
        web_app.settings["base_url"],
        options.database(),
    )
