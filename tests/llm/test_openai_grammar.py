"""The openai backend sends a request's grammar only to a server whose kind the spec names, under
that server's field, and each Completion says whether it was sent. A real HTTP server on
127.0.0.1 keeps the bodies it received (what the real openai client sent)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernelwright.llm import BackendError, GenerationRequest, make_backend
from tests.llm.conftest import free_port

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelwright[openai]')")

GRAMMAR = 'root ::= "```cpp\\ny = x;\\n```"'


@pytest.fixture(scope="module")
def server():
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(req)
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": req["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", bodies
    srv.shutdown()


@pytest.mark.parametrize("kind, field", [
    (None, None),
    ("llamacpp", {"grammar": GRAMMAR}),
    ("vllm", {"structured_outputs": {"grammar": GRAMMAR}}),
    ("vllm-legacy", {"guided_grammar": GRAMMAR}),
    ("sglang", {"ebnf": GRAMMAR}),
])
def test_grammar_goes_where_the_server_kind_reads_it(server, kind, field) -> None:
    url, bodies = server
    backend = make_backend(f"openai:{url}" + (f"?grammar={kind}" if kind else "") + "#m")
    bodies.clear()
    [[comp]] = backend.generate([GenerationRequest.chat("hi", grammar=GRAMMAR)])
    [body] = bodies
    sent = {k: body[k] for k in ("grammar", "structured_outputs", "guided_grammar", "ebnf") if k in body}
    assert sent == (field or {}) and comp.constrained == (kind is not None)
    bodies.clear()
    [[plain]] = backend.generate([GenerationRequest.chat("hi")])  # no grammar asked: none sent
    assert not {"grammar", "structured_outputs", "guided_grammar", "ebnf"} & set(bodies[0]) and not plain.constrained


def test_an_unknown_server_kind_is_one_line() -> None:
    with pytest.raises(BackendError, match="grammar='outlines'.*choose from llamacpp"):
        make_backend("openai:http://127.0.0.1:9/v1?grammar=outlines#m")
