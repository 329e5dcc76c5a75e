"""A minimal SMTP server for the e-mail notification tests: enough of the protocol for
Django's smtp backend. Subclass it with your own `received` list (and `gate`, to hold
the greeting back and play a server that accepts but never answers).
Used by tests/test_alerts_notify.py and tests/test_ingest_alert_mail.py."""

from __future__ import annotations

import socketserver
import threading


class SmtpSink(socketserver.StreamRequestHandler):
    received: list[str] = []
    gate: threading.Event | None = None

    def handle(self) -> None:
        cls = type(self)
        if cls.gate is not None:
            cls.gate.wait(30)
        self.wfile.write(b"220 localhost ESMTP\r\n")
        data, lines = False, []
        for raw in self.rfile:
            line = raw.decode().rstrip("\r\n")
            if data:
                if line == ".":
                    data = False
                    cls.received.append("\n".join(lines))
                    lines = []
                    self.wfile.write(b"250 queued\r\n")
                else:
                    lines.append(line)
                continue
            verb = line.split(" ")[0].upper()
            if verb == "DATA":
                data = True
                self.wfile.write(b"354 go ahead\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


def serve(handler: type[SmtpSink]) -> socketserver.ThreadingTCPServer:
    """Start `handler` on a free loopback port in a daemon thread."""
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv
