"""The Meshcat server process of ``sim.viewer``: meshcat's own ZMQ↔websocket bridge, made safe to leave running.

    python -m cmstack.sim._meshcat_server [--host HOST] [--log FILE] [--log-cap BYTES]

What differs from ``python -m meshcat.servers.zmqserver`` (meshcat 0.3):

* **A dead browser costs nothing.** meshcat forwards each command to every websocket with
  ``write_message``; on a socket that a killed browser left half-closed that call raises
  ``WebSocketClosedError`` inside the ZMQ handler, so the handler never answers the run's request
  (the run then waits forever), and each failed write future logs a traceback. Here a closed socket
  is dropped from the pool, the failure of a pending write is consumed, and the request is always
  answered.
* **Its output never blocks it.** It prints ``zmq_url=…`` and ``web_url=…`` on stdout (read once by
  the parent), then sends stdout and stderr to ``--log`` (default: nowhere), keeping at most
  ``--log-cap`` bytes (1 MB): nothing writes into a pipe that nobody reads.
* **It listens on the loopback only** unless asked. meshcat's web server listens on every
  interface (``0.0.0.0`` and ``[::]``): anyone who can reach the machine could watch the robot and
  open websockets. Here it binds ``--host`` (default ``127.0.0.1``); its ZMQ side is always on
  ``127.0.0.1`` (it takes commands).
* **It never outlives the run.** Its stdin is a pipe whose other end only the parent holds; when
  the parent exits for any reason (normal exit, exception, SIGINT, SIGTERM, even SIGKILL) the pipe
  reaches end-of-file and the server exits at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any

#: where the web server listens unless told otherwise (``--host``; ``cmstack run --viewer-host``)
LOOPBACK = "127.0.0.1"


class _CappedLog:
    """A text stream writing to ``path`` until ``cap`` bytes, then dropping the rest (one notice)."""

    def __init__(self, path: str | None, cap: int) -> None:
        self._fh = open(path, "a", encoding="utf-8", errors="replace") if path else None
        self._left = int(cap)
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            if self._fh is None or self._left <= 0:
                return len(s)
            chunk = s[: self._left]
            self._left -= len(chunk)
            self._fh.write(chunk)
            if self._left <= 0:
                self._fh.write("\n[meshcat.log capped: further output dropped]\n")
            self._fh.flush()
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _exit_when_parent_goes() -> None:
    """Block on stdin; end-of-file means the parent is gone (or closed us): exit at once."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except Exception:
        pass
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m cmstack.sim._meshcat_server")
    ap.add_argument("--log", default=None, help="file for the server's output (default: discarded)")
    ap.add_argument("--log-cap", type=int, default=1_000_000, help="bytes kept in the log")
    ap.add_argument(
        "--host", default=LOOPBACK, help="address the web server listens on (default: the loopback only)"
    )
    args = ap.parse_args(argv)

    import meshcat.servers.zmqserver as zs
    import tornado.websocket

    class Handler(zs.WebSocketHandler):
        def on_close(self) -> None:
            self.bridge.websocket_pool.discard(self)

        def check_origin(self, origin: str) -> bool:  # the page may come from a file:// or another port
            return True

    web_host = args.host

    class App(tornado.web.Application):
        def listen(
            self, port: int, address: str | None = None, **kw: Any
        ) -> Any:  # meshcat listens on every interface: not here
            return super().listen(port, address=web_host, **kw)

    class Bridge(zs.ZMQWebSocketBridge):
        def make_app(self) -> Any:
            return App(
                [
                    (
                        r"/static/(.*)",
                        zs.StaticFileHandlerNoCache,
                        {"path": zs.VIEWER_ROOT, "default_filename": zs.VIEWER_HTML},
                    ),
                    (r"/", Handler, {"bridge": self}),
                ]
            )

        def _write(self, ws: Any, data: bytes) -> None:
            try:
                fut = ws.write_message(data, binary=True)
            except tornado.websocket.WebSocketClosedError:
                self.websocket_pool.discard(ws)
                return
            fut.add_done_callback(lambda f: f.exception())  # a failed write is not an error here

        def forward_to_websockets(self, frames: list[bytes]) -> None:
            _, _, data = frames
            for ws in list(self.websocket_pool):
                self._write(ws, data)

        def send_scene(self, websocket: Any) -> None:
            for node in zs.walk(self.tree):
                for blob in (
                    ([node.object] if node.object is not None else [])
                    + list(node.properties)
                    + [b for b in (node.transform, node.animation) if b is not None]
                ):
                    self._write(websocket, blob)

        def handle_zmq(self, frames: list[bytes]) -> None:
            try:
                super().handle_zmq(frames)
            except Exception as e:  # never leave the run's request unanswered
                print(f"meshcat server: {type(e).__name__}: {e}", file=sys.stderr)
                try:
                    self.zmq_socket.send(b"ok")
                except Exception:
                    pass

    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    bridge = Bridge(host=LOOPBACK)  # (the ZMQ side and the URL printed; the web server: web_host)
    sys.stdout.write(f"zmq_url={bridge.zmq_url}\nweb_url={bridge.web_url}\n")
    sys.stdout.flush()
    log = _CappedLog(args.log, args.log_cap)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing of ours reaches the parent's pipe again
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = log
    try:
        bridge.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
