"""Inside the sandbox: listen on 127.0.0.1 ports, relay to unix sockets, exec the command.

Run as ``python -I -S -c <this source> '<[[port, socket path], ...]>' argv...``
by :func:`app.sandbox.forward.wrap`. Standard library only: nothing but the
interpreter is guaranteed to be visible. The listeners are bound before the
command starts (so its first connection is queued, never refused); a forked
child serves them and dies with the command (``PR_SET_PDEATHSIG``), while
this process becomes the command. It holds no privilege: it runs as the
sandbox user, and what it reaches is only what the socket's server allows.
"""

import contextlib
import ctypes
import json
import os
import signal
import socket
import sys
import threading

PR_SET_PDEATHSIG = 1
CHUNK = 65536


def relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass  # a peer went away: shut both directions down below
    for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        with contextlib.suppress(OSError):
            sock.shutdown(how)


def pair(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=relay, args=(upstream, client), daemon=True)
    back.start()
    relay(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=pair, args=(client, path), daemon=True).start()


def main() -> None:
    spec = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    listeners = []
    for port, path in spec:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError as exc:
            print(f"repairbot forwarder: cannot listen on 127.0.0.1:{port}: {exc}", file=sys.stderr)
            sys.exit(125)
        listener.listen(128)
        listeners.append((listener, path))
    parent = os.getpid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the command is already gone
            os._exit(0)
        threads = [threading.Thread(target=serve, args=item, daemon=True) for item in listeners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        os._exit(0)
    for listener, _ in listeners:
        listener.close()
    try:
        os.execvp(argv[0], argv)  # noqa: S606 (argv, never a shell string)
    except OSError as exc:
        print(f"repairbot sandbox: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
