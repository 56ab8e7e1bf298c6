"""A scripted model behind an Anthropic-compatible Messages endpoint, for offline agent tests.

Cassettes replay fixed exchanges; a scripted model instead answers each request by rules that read
the conversation so far (the tool results it was sent), so the same script can follow a repair
loop, a planning call or a frontier of parents however the agent orders its requests.

A script is a callable `(request) -> Reply`. `ScriptedModel.handler` serves it to the SDK through
an in-process `httpx2.MockTransport`; `ScriptedModel.serve()` serves it on a loopback HTTP port
for code that reads ANTHROPIC_BASE_URL. Every request is kept in `requests`.
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

Request = dict[str, Any]


@dataclass
class Reply:
    """One HTTP answer: an assistant message (blocks + stop reason) or an API error."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    status: int = 200
    error_type: str = ""
    input_tokens: int = 1000
    output_tokens: int = 200

    def body(self, message_id: str, model: str) -> dict[str, Any]:
        if self.status != 200:
            return {"type": "error", "error": {"type": self.error_type or "api_error",
                                               "message": f"scripted {self.error_type}"}}
        return {
            "id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": self.blocks, "stop_reason": self.stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }


_ids = itertools.count(1)


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def tool_use(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_scripted{next(_ids):05d}", "name": name,
            "input": arguments}


def call(name: str, **arguments: Any) -> Reply:
    """A reply that asks for one tool and waits for its result."""
    return Reply([tool_use(name, arguments)], stop_reason="tool_use")


def done(words: str = "Done.") -> Reply:
    return Reply([text(words)])


def api_error(status: int = 529, error_type: str = "overloaded_error") -> Reply:
    return Reply(status=status, error_type=error_type)


def last_tool_results(request: Request) -> list[dict[str, Any]]:
    """The tool results of the request's last (user) message, in order."""
    content = request["messages"][-1]["content"]
    if isinstance(content, str):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def opening_text(request: Request) -> str:
    """The text of the conversation's first user message (the experiment's briefing)."""
    content = request["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))


def tool_uses(request: Request) -> list[dict[str, Any]]:
    """Every tool_use block the assistant has sent in this conversation, oldest first."""
    uses = []
    for message in request["messages"]:
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            uses += [b for b in message["content"]
                     if isinstance(b, dict) and b.get("type") == "tool_use"]
    return uses


def tool_names(request: Request) -> list[str]:
    return [str(t.get("name")) for t in request.get("tools") or []]


class ScriptedModel:
    """Answers each Messages request with `script(request)`; keeps every request it was sent."""

    def __init__(self, script: Callable[[Request], Reply], model: str = "claude-sonnet-5-5"):
        self.script = script
        self.model = model
        self.requests: list[Request] = []

    def answer(self, body: bytes) -> tuple[int, dict[str, Any]]:
        request = json.loads(body)
        self.requests.append(request)
        reply = self.script(request)
        return reply.status, reply.body(f"msg_scripted{len(self.requests):05d}", self.model)

    def handler(self, request: Any) -> Any:
        """For `httpx2.MockTransport`: the SDK talks to the script in-process."""
        httpx2 = pytest.importorskip("httpx2")
        status, body = self.answer(request.content)
        return httpx2.Response(status, json=body)

    def client(self) -> Any:
        httpx2 = pytest.importorskip("httpx2")
        return httpx2.Client(transport=httpx2.MockTransport(self.handler))

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the script on 127.0.0.1; yields the base URL for ANTHROPIC_BASE_URL."""
        with serve_loopback(lambda path, headers, body: self.answer(body)) as url:
            yield url


Answer = Callable[[str, dict[str, str], bytes], tuple[int, dict[str, Any]]]


@contextmanager
def serve_loopback(answer: Answer) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 whose every POST gets `answer(path, headers, body)` (a status
    and a JSON body); yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status, reply = answer(self.path, dict(self.headers), body)
            payload = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
