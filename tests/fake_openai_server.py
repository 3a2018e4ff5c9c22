"""A loopback server speaking the OpenAI chat-completions protocol, for testing the ``llm`` diagnoser.

``FakeChatServer(replies)`` answers ``POST /v1/chat/completions`` with the next item of ``replies``: a
string is sent as the assistant message; an ``int`` is sent as that HTTP status with an error body and
``retry-after-ms: 10``, so the client's retries do not wait seconds. Every request body is kept in ``requests``.

``FakeChatServer(model=fn)`` serves a scripted model instead (the ``agent`` tests): ``fn(body)`` is called with each
request and answers a string, a status, a :class:`ToolCalls` (the assistant asks for tools), or a :class:`Stall`
(the server holds the request that long, or until it is shut down, then answers 500). ``usage`` is what every
answer reports as spent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ToolCalls:
    """An assistant message asking for tools: ``calls`` are (name, arguments) pairs."""

    calls: list[tuple[str, dict]]
    content: str = ""


@dataclass
class Stall:
    seconds: float


@dataclass
class Usage:
    prompt_tokens: int = 1
    completion_tokens: int = 1
    cached_tokens: int | None = None
    sent: bool = True  # False: the answer carries no usage at all

    def body(self) -> dict | None:
        if not self.sent:
            return None
        out = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
               "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.cached_tokens is not None:
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return out


class FakeChatServer:
    def __init__(self, replies: list[str | int] | None = None, *, model: Callable[[dict], object] | None = None,
                 usage: Usage | None = None):
        self.replies = list(replies or [])
        self.model = model
        self.usage = usage or Usage()
        self.requests: list[dict] = []
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body})
                if server.model is not None:
                    reply = server.model(body)
                else:
                    reply = server.replies.pop(0) if server.replies else 500
                if isinstance(reply, Stall):
                    server.stopping.wait(reply.seconds)
                    reply = 500
                message = {"role": "assistant", "content": reply}
                if isinstance(reply, ToolCalls):
                    message = {"role": "assistant", "content": reply.content or None, "tool_calls": [
                        {"id": f"call_{len(server.requests)}_{i}", "type": "function",
                         "function": {"name": name, "arguments": json.dumps(args)}}
                        for i, (name, args) in enumerate(reply.calls)]}
                if isinstance(reply, int):
                    payload = json.dumps({"error": {"message": f"status {reply}", "type": "test"}}).encode()
                    self.send_response(reply)
                    self.send_header("retry-after-ms", "10")  # the openai client honours it: fast retries
                else:
                    payload = json.dumps({
                        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                                     "message": message}],
                        **({"usage": server.usage.body()} if server.usage.sent else {}),
                    }).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:  # the client gave up (a stalled request cancelled by its deadline)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
