"""Opt-in contract test against a real host CLI: Gemini CLI (``npm install @google/gemini-cli``)
runs headless against a fake model on 127.0.0.1 that asks for a ``write_file`` outside the goal's
scope; loopx's installed ``BeforeTool`` hook must refuse it, and the model must be told why.

Runs when ``LOOPX_TEST_GEMINI`` names the ``gemini`` executable (or ``gemini`` is on PATH);
skipped otherwise, since the host is not a Python dependency."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import subprocess_env

GEMINI = os.environ.get("LOOPX_TEST_GEMINI") or shutil.which("gemini")
pytestmark = pytest.mark.skipif(not GEMINI or os.name != "posix", reason="set LOOPX_TEST_GEMINI to a gemini CLI")


def fake_model(target: str, seen: list[str]) -> ThreadingHTTPServer:
    """A model that calls ``write_file(target)`` once, then answers "done."."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, ctype: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send("application/json", b'{"models": []}')

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
            seen.append(body)
            if "countTokens" in self.path:
                return self._send("application/json", b'{"totalTokens": 10}')
            wants_tool = "write_file" in body and '"functionResponse"' not in body
            part = ({"functionCall": {"name": "write_file", "args": {"file_path": target, "content": "x\n"}}}
                    if wants_tool else {"text": "done."})
            resp = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5, "totalTokenCount": 10}}
            data = json.dumps(resp).encode()
            if "stream" in self.path:
                return self._send("text/event-stream", b"data: " + data + b"\r\n\r\n")
            return self._send("application/json", data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_real_gemini_cli_is_refused_by_the_installed_before_tool_hook(goal, project, cli, tmp_path):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    assert cli("hooks", "--install", "--host", "gemini").code == 0
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}), encoding="utf-8")
    target = project / "docs" / "notes.md"
    seen: list[str] = []
    srv = fake_model(str(target), seen)
    try:
        env = subprocess_env({"HOME": str(home), "GEMINI_API_KEY": "fake", "GEMINI_CLI_TRUST_WORKSPACE": "true",
                              "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{srv.server_address[1]}",
                              "PATH": f"{os.path.dirname(GEMINI)}{os.pathsep}/usr/bin:/bin"})
        proc = subprocess.run([GEMINI, "-p", "write the notes", "--yolo", "-o", "json"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        srv.shutdown()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not target.exists()
    told = [b for b in seen if '"functionResponse"' in b]
    assert told and "Tool execution blocked: loopx:" in told[-1] and "outside the scope" in told[-1]
