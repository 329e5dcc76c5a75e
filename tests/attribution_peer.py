"""One end of a TCP connection in its own process, for tests/test_collect_attribution.py:
the attribution test needs the two ends owned by two different processes (neither of
them the test), each with a distinctive comm, driven step by step over stdin/stdout.

Usage: attribution_peer.py COMM HOST PORT [UNIX_FD]. Sets its comm (prctl PR_SET_NAME), then reads
one command per line and answers one line per command:
  listen -> "ok COOKIE"         accept -> "ok COOKIE"       connect -> "ok COOKIE"
  send N / recv N -> "ok"       eof -> "ok" (the peer closed) reset -> "ok" (ECONNRESET)
  give -> "ok" (hands the connection over UNIX_FD, SCM_RIGHTS)   take -> "ok COOKIE"
  close / abort (SO_LINGER 0) -> "ok"     quit -> "ok", closes the listener, exits
Keep the command names in sync with the test's Peer helper."""

from __future__ import annotations

import ctypes
import socket
import struct
import sys

PR_SET_NAME = 15
SO_COOKIE = 57


def cookie(s: socket.socket) -> int:
    return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8), "little")


def recv_exactly(s: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = s.recv(n - got)
        if not chunk:
            raise EOFError(f"peer closed after {got} of {n} bytes")
        got += len(chunk)


def main(comm: str, host: str, port: int, unix: socket.socket | None) -> None:
    ctypes.CDLL(None).prctl(PR_SET_NAME, comm.encode(), 0, 0, 0)
    listener: socket.socket | None = None
    conn: socket.socket | None = None
    for line in sys.stdin:
        cmd, *arg = line.split()
        reply = "ok"
        if cmd == "listen":
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(4)
            reply = f"ok {cookie(listener)}"
        elif cmd == "accept" and listener is not None:
            conn, _ = listener.accept()
            reply = f"ok {cookie(conn)}"
        elif cmd == "connect":
            conn = socket.create_connection((host, port), timeout=10)
            reply = f"ok {cookie(conn)}"
        elif cmd == "send" and conn is not None:
            conn.sendall(b"x" * int(arg[0]))
        elif cmd == "recv" and conn is not None:
            recv_exactly(conn, int(arg[0]))
        elif cmd == "eof" and conn is not None:
            reply = "ok" if conn.recv(1) == b"" else "error: data where EOF was expected"
        elif cmd == "reset" and conn is not None:
            try:
                conn.recv(1)
                reply = "error: no reset"
            except ConnectionResetError:
                pass
        elif cmd == "give" and conn is not None and unix is not None:
            socket.send_fds(unix, [b"c"], [conn.fileno()])
            conn.close()  # the socket lives on in the taker's file
        elif cmd == "take" and unix is not None:
            _, fds, _, _ = socket.recv_fds(unix, 1, 1)
            conn = socket.socket(fileno=fds[0])
            reply = f"ok {cookie(conn)}"
        elif cmd == "close" and conn is not None:
            conn.close()
        elif cmd == "abort" and conn is not None:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        elif cmd == "quit":
            if listener is not None:
                listener.close()
            print(reply, flush=True)
            return
        else:
            reply = f"error: {cmd} out of order"
        print(reply, flush=True)


if __name__ == "__main__":
    fd = socket.socket(fileno=int(sys.argv[4])) if len(sys.argv) > 4 else None
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), fd)
