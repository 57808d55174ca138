"""A TCP relay in front of the Ray dashboard that can drop connections and counts bytes.

What a flaky `kubectl port-forward` or a lost tunnel looks like to the provider: the port still
accepts connections, then closes them before any answer (`drop`), or only every other one
(`flaky`). `received` counts the bytes relayed from the dashboard to the client, so a test can
tell a log tail from a whole log without timing anything.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator


class TcpProxy:
    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.mode = "pass"  # pass | drop | flaky
        self.received = 0
        self._accepted = 0
        self._lock = threading.Lock()
        self._closed = False
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._serve, daemon=True).start()

    def set_mode(self, mode: str) -> None:
        """Switch mode; `drop` also cuts the connections already open (kept-alive ones)."""
        with self._lock:
            self.mode = mode
            cut = list(self._open) if mode == "drop" else []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.set_mode("drop")

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._accepted += 1
                drop = self.mode == "drop" or (self.mode == "flaky" and self._accepted % 2)
            if drop:
                client.close()
                continue
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        try:
            while data := source.recv(65536):
                if count:
                    with self._lock:
                        self.received += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with self._lock:
                    self._open.discard(sock)


@contextlib.contextmanager
def tcp_proxy(target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()
