"""A minimal WebDriver BiDi client (synchronous, over ``websockets``) to drive Debian's
Firefox ESR, which speaks BiDi natively: Playwright needs its own patched Firefox and
there is no geckodriver package. Commands carry incrementing ids; a command waits for the
result with its id (events in between are ignored) and raises ``BidiError`` on an error
response. Every wait is bounded.
Keep in sync with: tests/browser/test_dashboard_firefox.py (its only user).
"""

from __future__ import annotations

import base64
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect


class BidiError(RuntimeError):
    """An error response to a BiDi command, or a script that threw."""


class Bidi:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self._stack = ExitStack()  # websockets wants connect() used as a context manager
        self.ws: ClientConnection = self._stack.enter_context(connect(url, open_timeout=timeout, max_size=64 * 2**20))
        self.timeout = timeout
        self.next_id = 0
        self.events: list[dict[str, Any]] = []  # events seen while waiting for answers

    def send(self, method: str, params: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg_id = self.next_id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"BiDi {method}: no answer within {timeout or self.timeout} s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("type") == "event":
                self.events.append(msg)
                continue
            if msg.get("id") != msg_id:
                continue  # a late answer to an earlier, timed-out command
            if msg.get("type") == "error":
                raise BidiError(f"BiDi {method}: {msg.get('error')}: {msg.get('message')}")
            return dict(msg["result"])

    def page_errors(self) -> list[str]:
        """Uncaught JavaScript errors reported so far (needs a log.entryAdded subscription)."""
        self.send("session.status", {})  # a round trip, so events queued before it are read
        return [
            str(e["params"].get("text"))
            for e in self.events
            if e.get("method") == "log.entryAdded" and e["params"].get("type") == "javascript"
        ]

    def close(self) -> None:
        self._stack.close()


class Tab:
    """One top-level browsing context of a BiDi session."""

    def __init__(self, bidi: Bidi, context: str) -> None:
        self.bidi = bidi
        self.context = context

    def navigate(self, url: str) -> None:
        self.bidi.send("browsingContext.navigate", {"context": self.context, "url": url, "wait": "complete"})

    def call(self, function: str, *args: Any, timeout: float | None = None) -> Any:
        """Call a JavaScript function (source text) with JSON-able arguments; await a
        returned promise; return the result as plain JSON (via JSON.stringify in the page,
        so no BiDi remote-value decoding is needed)."""
        wrapped = f"async (...a) => JSON.stringify(await ({function})(...a.map((x) => JSON.parse(x))))"
        result = self.bidi.send(
            "script.callFunction",
            {
                "functionDeclaration": wrapped,
                "arguments": [{"type": "string", "value": json.dumps(a)} for a in args],
                "target": {"context": self.context},
                "awaitPromise": True,
            },
            timeout=timeout,
        )
        if result.get("type") == "exception":
            details = result["exceptionDetails"]
            raise BidiError(f"script threw: {details.get('text')}")
        value = result["result"]
        return None if value.get("type") == "undefined" else json.loads(value["value"])

    def wait_for(self, expression: str, timeout_ms: int = 5000) -> None:
        """Poll a JavaScript expression in the page until it is truthy (bounded)."""
        poll = f"""(ms) => new Promise((resolve, reject) => {{
          const test = () => ({expression});
          const end = Date.now() + ms;
          const tick = () => {{
            if (test()) return resolve(true);
            if (Date.now() > end) return reject(new Error('timed out waiting for ' + {json.dumps(expression)}));
            setTimeout(tick, 25);
          }};
          tick();
        }})"""
        self.call(poll, timeout_ms, timeout=timeout_ms / 1000 + 5)

    def screenshot(self, path: Path) -> None:
        result = self.bidi.send("browsingContext.captureScreenshot", {"context": self.context, "origin": "document"})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))

    def close(self) -> None:
        self.bidi.send("browsingContext.close", {"context": self.context})
