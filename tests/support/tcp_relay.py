"""A TCP relay a test puts between a process and a service (PostgreSQL), then cuts and
restores: an outage of that service for that process alone, the service itself untouched."""

from __future__ import annotations

import socket
import threading


class TcpRelay:
    """Relay 127.0.0.1:`port` to `target`; `cut()` closes every connection and answers new
    ones by closing them at once (as a service that went away), `restore()` relays again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = True
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-relay").start()

    def cut(self) -> None:
        with self._lock:
            self._open = False
            live, self._live = self._live, set()
        for sock in live:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._open = True

    def stop(self) -> None:
        self._stopped = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            with self._lock:
                is_open = self._open
            if not is_open:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._live.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
