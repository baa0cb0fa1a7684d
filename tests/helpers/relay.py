"""A TCP front for a node under test: it accepts on 127.0.0.1 and relays each connection to the node's port,
after the faults a test asks for (the node's sshd itself is never changed).

- ``drops``: its first connections are closed unanswered, as OpenSSH's ``MaxStartups`` does past its limit;
- ``delay``: each connection is held that many seconds before it is relayed (a node slow to answer);
- ``hold``: what the client sends past its first ``HELD_AFTER`` bytes (past a login) is held that many
  seconds more, once per connection;
- ``frozen``: once set, nothing more is relayed either way (the connections stay open: a node that hangs).

When each connection was accepted and when its relay began are kept (``time.monotonic()``).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class TcpFront:
    """A front at ``port`` for the node listening at ``target``; see the module's docstring."""

    #: More than a login sends (about 8 KB with the observer's command line); the observer's bundle is 80 KB.
    HELD_AFTER = 16384

    def __init__(self, target: int, *, drops: int = 0, delay: float = 0.0, hold: float = 0.0) -> None:
        self.target, self.drops, self.delay, self.hold = target, drops, delay, hold
        self.accepted: list[float] = []
        self.relayed: list[float] = []
        self.frozen = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            if len(self.accepted) <= self.drops:
                conn.close()
                continue
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        time.sleep(self.delay)
        self.relayed.append(time.monotonic())
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:
            conn.close()
            return
        threading.Thread(target=self._pipe, args=(conn, upstream, self.hold), daemon=True).start()
        threading.Thread(target=self._pipe, args=(upstream, conn, 0.0), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, hold: float) -> None:
        sent = 0
        try:
            while data := a.recv(65536):
                if hold and sent + len(data) > self.HELD_AFTER:
                    time.sleep(hold)
                    hold = 0.0
                sent += len(data)
                if not self.frozen.is_set():
                    b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Accept no more connections (those relayed go on until either side closes)."""
        self.server.close()
