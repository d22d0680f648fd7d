"""flow_cases.api_call, the real-server tests' Prefect API request: retried on a busy server's 503 (what failed CI on
2026-11-29), not on other errors."""
import json
import threading
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flow_cases import api_call


@pytest.fixture
def server():
    """A local server answering each path with the next (status, body) of ``replies[path]``; records the requests."""
    replies, seen = {}, []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, self.rfile.read(length) if length else b""))
            status, body = replies[self.path].pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/api", replies, seen
    httpd.shutdown()
    httpd.server_close()


def test_api_call_retries_a_busy_servers_503(server):
    api, replies, seen = server
    replies["/api/runs"] = [(503, {"detail": "Service Unavailable"}), (200, {"id": "r1"})]
    assert api_call(api, "/runs", {"x": 1}) == {"id": "r1"}
    assert [(m, p) for m, p, _ in seen] == [("POST", "/api/runs")] * 2  # the same request again
    assert json.loads(seen[1][2]) == {"x": 1}


def test_api_call_raises_other_errors_at_once(server):
    api, replies, seen = server
    replies["/api/missing"] = [(404, {"detail": "Not Found"}), (200, {})]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        api_call(api, "/missing")
    assert len(seen) == 1


def test_api_call_gives_up_after_its_tries(server):
    api, replies, seen = server
    replies["/api/busy"] = [(503, {})] * 2
    with pytest.raises(urllib.error.HTTPError, match="503"):
        api_call(api, "/busy", tries=2)
    assert len(seen) == 2
