"""Opt-in contract tests against real host CLIs, each run headless against a fake model on
127.0.0.1 that asks to write a file outside the goal's scope: loopx's installed guard must refuse
it and the model must be told why.

- Gemini CLI (``npm install @google/gemini-cli``): the ``BeforeTool`` hook in
  ``.gemini/settings.json``; runs when ``LOOPX_TEST_GEMINI`` names ``gemini`` (or it is on PATH).
- Pi (``npm install @mariozechner/pi-coding-agent``): the extension ``.pi/extensions/loopx-guard.ts``,
  driven by ``loopx run --agent pi`` (the preset, packet on stdin); runs when ``LOOPX_TEST_PI``
  names ``pi`` (or it is on PATH).
- OpenCode (``npm install opencode-ai``): the plugin ``.opencode/plugins/loopx-guard.js`` under
  ``opencode run``; runs when ``LOOPX_TEST_OPENCODE`` names ``opencode`` (or it is on PATH).

Skipped otherwise, since the hosts are not Python dependencies."""

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
PI = os.environ.get("LOOPX_TEST_PI") or shutil.which("pi")
OPENCODE = os.environ.get("LOOPX_TEST_OPENCODE") or shutil.which("opencode")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX hosts here")


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


@pytest.mark.skipif(not GEMINI, reason="set LOOPX_TEST_GEMINI to a gemini CLI")
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
        env = subprocess_env({"HOME": str(home), "PWD": str(project), "GEMINI_API_KEY": "fake",
                              "GEMINI_CLI_TRUST_WORKSPACE": "true",
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


def fake_openai(target: str, seen: list[str], path_key: str = "path") -> ThreadingHTTPServer:
    """An OpenAI-compatible chat model (streaming) that calls a ``write`` tool once."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b'{"data": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
            seen.append(body)
            req = json.loads(body)
            done = any(m.get("role") == "tool" for m in req.get("messages", []))
            if done:
                delta = {"role": "assistant", "content": "done."}
                finish = "stop"
            else:
                args = json.dumps({path_key: target, "content": "x\n"})
                delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                              "function": {"name": "write", "arguments": args}}]}
                finish = "tool_calls"
            base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": req.get("model")}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for choice in ({"index": 0, "delta": delta, "finish_reason": None},
                           {"index": 0, "delta": {}, "finish_reason": finish}):
                self.wfile.write(b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.mark.skipif(not PI, reason="set LOOPX_TEST_PI to a pi CLI")
def test_real_pi_runs_the_preset_turn_and_the_extension_refuses_the_write(goal, project, cli, tmp_path):
    from conftest import run_loopx

    assert cli("scope", "set", "--allow", "src/**").code == 0
    assert cli("hooks", "--install", "--host", "pi").code == 0
    target = project / "docs" / "notes.md"
    seen: list[str] = []
    srv = fake_openai(str(target), seen)
    agent_dir = tmp_path / "pi-agent"
    agent_dir.mkdir()
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"http://127.0.0.1:{srv.server_address[1]}/v1", "api": "openai-completions", "apiKey": "x",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False}, "models": [{"id": "m1"}]}}}),
        encoding="utf-8")
    (agent_dir / "settings.json").write_text(json.dumps({"defaultProvider": "fake", "defaultModel": "m1"}),
                                             encoding="utf-8")
    try:
        r = run_loopx(["--agent", "pi", "run", "--once", "--permission-mode", "edit", "--json"], cwd=project, timeout=300,
                      env={"PI_CODING_AGENT_DIR": str(agent_dir),
                           "PATH": f"{os.path.dirname(PI)}{os.pathsep}{os.environ['PATH']}"})
    finally:
        srv.shutdown()
    assert r.code == 0, r.err
    turn = json.loads(r.out)["data"]["turns"][0]
    assert turn["agent_exit"] == 0 and not target.exists()
    assert seen and turn["run_id"] in seen[0]  # the packet reached pi as its prompt (stdin)
    told = [b for b in seen if '"role":"tool"' in b]
    assert told and "outside the scope of goal g1" in told[-1]


@pytest.mark.skipif(not OPENCODE, reason="set LOOPX_TEST_OPENCODE to an opencode CLI")
def test_real_opencode_loads_the_plugin_and_it_refuses_the_write(goal, project, cli, tmp_path):
    assert cli("scope", "set", "--allow", "src/**").code == 0
    assert cli("hooks", "--install", "--host", "opencode").code == 0
    target = project / "docs" / "notes.md"
    seen: list[str] = []
    srv = fake_openai(str(target), seen, path_key="filePath")
    (project / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake", "models": {"m1": {"name": "m1"}},
                              "options": {"baseURL": f"http://127.0.0.1:{srv.server_address[1]}/v1", "apiKey": "x"}}},
        "model": "fake/m1"}), encoding="utf-8")
    home = tmp_path / "oc-home"
    home.mkdir()
    try:
        proc = subprocess.run([OPENCODE, "run", "--model", "fake/m1", "write the notes"], cwd=project, capture_output=True, text=True,
                              timeout=300, env=subprocess_env({"HOME": str(home), "PWD": str(project),
                                                               "XDG_CONFIG_HOME": str(home / ".config")}))
    finally:
        srv.shutdown()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not target.exists()
    assert "outside the scope of goal g1" in proc.stdout + proc.stderr
    told = [b for b in seen if '"role":"tool"' in b]
    assert told and "outside the scope of goal g1" in told[-1]
