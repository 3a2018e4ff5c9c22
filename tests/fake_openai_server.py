"""A loopback server speaking the OpenAI chat-completions protocol, for testing the ``llm`` diagnoser.

``FakeChatServer(replies)`` answers ``POST /v1/chat/completions`` with the next item of ``replies``: a
string is sent as the assistant message; an ``int`` is sent as that HTTP status with an error body and
``retry-after-ms: 10``, so the client's retries do not wait seconds. Every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeChatServer:
    def __init__(self, replies: list[str | int]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body})
                reply = server.replies.pop(0) if server.replies else 500
                if isinstance(reply, int):
                    payload = json.dumps({"error": {"message": f"status {reply}", "type": "test"}}).encode()
                    self.send_response(reply)
                    self.send_header("retry-after-ms", "10")  # the openai client honours it: fast retries
                else:
                    payload = json.dumps({
                        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
