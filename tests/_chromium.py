"""A small headless-Chromium driver for the browser tests: the DevTools protocol over one websocket
(``websockets``' synchronous client), enough to open a page, evaluate JavaScript and take a screenshot.

    with Chromium() as browser:
        page = browser.new_page()
        page.navigate("http://127.0.0.1:7000/static/")
        page.wait_for("window.viewer !== undefined")
        img = page.screenshot()            # H×W×3 uint8

Chromium runs with software WebGL (SwiftShader), a new empty profile and no background traffic.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

INSTALL_HINT = (
    "headless Chromium is not installed: `sudo apt-get install -y chromium` (Debian/Ubuntu), "
    "or put a chromium/google-chrome binary on PATH; .ci/run installs it"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--use-gl=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu-sandbox",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-crash-reporter",
    "--disable-breakpad",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Page:
    """One page target, driven through its own DevTools websocket."""

    def __init__(self, ws_url: str, timeout: float = 60.0):
        from contextlib import ExitStack

        from websockets.sync.client import connect

        self._stack = ExitStack()
        self._ws = self._stack.enter_context(connect(ws_url, max_size=None, open_timeout=timeout))
        self._ids = itertools.count(1)
        self.timeout = timeout
        self.console: list[str] = []

    def call(self, method: str, **params):
        """Send one command; return its result (events that arrive meanwhile are kept as console lines)."""
        i = next(self._ids)
        self._ws.send(json.dumps({"id": i, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            msg = json.loads(self._ws.recv(timeout=max(deadline - time.monotonic(), 0.01)))
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if msg.get("method") == "Runtime.exceptionThrown":
                self.console.append(json.dumps(msg["params"]["exceptionDetails"])[:3000])
            elif msg.get("method") == "Runtime.consoleAPICalled":
                self.console.append(
                    " ".join(
                        str(a.get("value", a.get("description", ""))) for a in msg["params"].get("args", [])
                    )[:500]
                )

    def evaluate(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(
                f"JavaScript error in {expr[:80]!r}: {r['exceptionDetails'].get('text')} "
                f"{r['exceptionDetails'].get('exception', {}).get('description', '')[:300]}"
            )
        return r["result"].get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Page.navigate", url=url)

    def wait_for(self, expr: str, timeout: float = 30.0, poll: float = 0.2):
        """Poll ``expr`` until it is truthy; return its value (raise TimeoutError with the last value)."""
        deadline, val = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                val = self.evaluate(expr)
            except RuntimeError as e:
                val = str(e)
            else:
                if val:
                    return val
            time.sleep(poll)
        raise TimeoutError(
            f"waited {timeout:g} s for {expr[:80]!r}; last value {val!r}; console: {self.console[-5:]}"
        )

    def screenshot(self) -> np.ndarray:
        from PIL import Image

        data = self.call("Page.captureScreenshot", format="png")["data"]
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))

    def close(self) -> None:
        try:
            self._stack.close()
        except Exception:
            pass


class Chromium:
    """A headless Chromium process with a fresh profile, reachable through the DevTools protocol."""

    def __init__(
        self, binary: str | None = None, width: int = 1280, height: int = 720, timeout: float = 60.0
    ):
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.size, self.timeout = (width, height), timeout
        self.proc = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="cmstack-chromium-")
        args = [
            self.binary,
            *FLAGS,
            f"--user-data-dir={self._profile}",
            "--remote-debugging-port=0",
            f"--window-size={self.size[0]},{self.size[1]}",
            "about:blank",
        ]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"Chromium did not start ({self.binary}, exit {self.proc.poll()})")
            time.sleep(0.1)
        self.port = int(port_file.read_text().split()[0])
        return self

    def new_page(self) -> Page:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=self.timeout) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        if not pages:
            raise RuntimeError("Chromium has no page target")
        page = Page(pages[0]["webSocketDebuggerUrl"], timeout=self.timeout)
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.size[0],
            height=self.size[1],
            deviceScaleFactor=1,
            mobile=False,
        )
        return page

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):  # its whole process group:
                try:  # renderer, GPU, zygotes
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    pass
        shutil.rmtree(getattr(self, "_profile", ""), ignore_errors=True)
