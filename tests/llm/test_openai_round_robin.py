"""The openai backend over several servers: round-robin, and a dead server is skipped on retry.

Two real HTTP servers on 127.0.0.1 speak the two endpoints the backend uses (/v1/models,
/v1/chat/completions) through the real openai client; each answers with its own name, so the
test sees which server served which call."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernelwright.llm import GenerationRequest, make_backend
from tests.llm.conftest import free_port

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelwright[openai]')")


def serve(name: str, hits: Counter) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send({"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": name}]})

        def do_POST(self) -> None:  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hits[name] += 1
            n = req.get("n", 1)
            self._send({
                "id": "x", "object": "chat.completion", "created": 0, "model": req["model"],
                "choices": [{"index": i, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"{name}:{req.get('seed')}"}} for i in range(n)],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2 * n, "total_tokens": 3 + 2 * n},
            })

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def test_calls_alternate_between_servers() -> None:
    hits: Counter = Counter()
    a, b = serve("a", hits), serve("b", hits)
    try:
        backend = make_backend(f"openai:{url(a)},{url(b)}?concurrency=1#m")
        assert backend.base_urls == [url(a), url(b)]
        reqs = [GenerationRequest.chat(f"prompt {i}", max_tokens=4, seed=i) for i in range(6)]
        results = backend.generate(reqs)
        assert hits == Counter({"a": 3, "b": 3})
        assert [r[0].text.split(":")[1] for r in results] == [str(i) for i in range(6)]  # answers stay in order
        backend.close()
    finally:
        a.shutdown()
        b.shutdown()


def test_a_dead_server_is_skipped_by_the_retry() -> None:
    hits: Counter = Counter()
    alive = serve("alive", hits)
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    try:
        backend = make_backend(f"openai:{dead},{url(alive)}?retries=1#m")
        results = backend.generate([GenerationRequest.chat(f"p{i}", max_tokens=4, seed=i) for i in range(4)])
        assert all(r[0].text.startswith("alive:") for r in results)
        assert hits["alive"] == 4
    finally:
        alive.shutdown()
