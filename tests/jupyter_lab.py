"""Test helper: a real JupyterLab (or Notebook 7) server on 127.0.0.1, and headless Chromium.

Everything Jupyter and IPython write goes to a temporary directory; the server runs as root only
with ``--allow-root`` (CI is root). Chromium is Debian's (``/usr/bin/chromium``): no browser can be
downloaded here, so Playwright is given its path.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
]
# per-plugin settings written into the server's own settings dir
BASE_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},  # every cell in the DOM
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path

    def page_url(self, notebook: str, app: str = "lab") -> str:
        where = "lab/tree" if app == "lab" else "notebooks"
        return f"{self.url}/{where}/{notebook}?token={self.token}"

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@contextmanager
def jupyter_server(
    tmp: Path, app: str = "lab", settings: dict[str, dict[str, Any]] | None = None
) -> Iterator[Server]:
    """Start ``jupyter lab`` (or ``jupyter notebook``, Notebook 7) serving ``tmp/root``."""
    root, home = tmp / "root", tmp / "home"
    root.mkdir(parents=True, exist_ok=True)
    user_settings = home / "config" / "lab" / "user-settings"
    # Notebook 7 fails on settings of plugins it does not have: only the ones asked for
    for plugin, values in {**(BASE_SETTINGS if app == "lab" else {}), **(settings or {})}.items():
        package, name = plugin.rsplit("/", 1)
        path = user_settings / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTERLAB_SETTINGS_DIR": str(user_settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    env.pop("KERAS_NBGUARD_DASHBOARD", None)
    port, token = free_port(), secrets.token_hex(16)
    expose = "LabApp" if app == "lab" else "JupyterNotebookApp"
    log = tmp / f"jupyter-{app}.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        app,
        "--allow-root",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--{expose}.expose_app_in_browser=True",
        f"--ServerApp.root_dir={root}",
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    server = Server(f"http://127.0.0.1:{port}", token, root, process, log)
    try:
        _wait_until_up(server, timeout=90)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_until_up(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"jupyter exited ({server.process.returncode}):\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(
                f"{server.url}/api/status?token={server.token}", timeout=2
            ) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"jupyter did not answer within {timeout:.0f} s:\n{server.log_tail()}")


@contextmanager
def chromium_page(width: int = 1300, height: int = 1100) -> Iterator[Any]:
    """A headless Chromium page; ``page.errors`` collects uncaught page errors."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.errors = []
            page.on("pageerror", lambda exc: page.errors.append(str(exc)))
            yield page
        finally:
            browser.close()


KERNEL = "window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel"


def wait_idle(page: Any, timeout: float) -> None:
    page.wait_for_function(f"() => {KERNEL}?.status === 'idle'", timeout=timeout * 1000)


def run_all(page: Any, timeout: float) -> None:
    """Run every cell and wait until all have run; an early run-all is silently dropped, so it is
    sent again until the first input prompt shows it was taken ("[*]" or a number)."""
    wait_idle(page, 60)
    first = "document.querySelector('.jp-CodeCell .jp-InputPrompt')?.textContent || ''"
    deadline = time.monotonic() + 60
    while True:
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        try:
            page.wait_for_function(f"() => /\\[[*\\d]/.test({first})", timeout=3000)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    prompts = "[...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
    page.wait_for_function(
        f"() => {prompts}.every(p => /\\[\\d+\\]/.test(p.textContent)) && "
        f"{KERNEL}?.status === 'idle'",
        timeout=timeout * 1000,
    )


def kernel_eval(page: Any, code: str, timeout: float = 30) -> str:
    """Run ``code`` in the notebook's kernel (not in a cell) and return what it printed."""
    return page.evaluate(
        """async ([code, ms]) => {
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const future = kernel.requestExecute({code, store_history: false});
            let out = '';
            future.onIOPub = msg => {
                if (msg.header.msg_type === 'stream') out += msg.content.text;
                if (msg.header.msg_type === 'error') out += msg.content.ename + ': '
                                                          + msg.content.evalue;
            };
            await Promise.race([future.done, new Promise(r => setTimeout(r, ms))]);
            return out;
        }""",
        [code, int(timeout * 1000)],
    )
