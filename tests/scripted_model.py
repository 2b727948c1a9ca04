"""A scripted model server on 127.0.0.1 for contract tests against the real host CLIs (issue 23).

It speaks the model APIs the hosts use and answers each model request with the next step of a
script: ``{"tool": name, "args": {...}}`` (the model asks for a tool call) or ``{"text": str}``
(a final answer; after the script the model always says ``done.``). Every request is recorded
(``requests``: parsed JSON bodies with ``path``), and ``tool_results()`` gives what the host sent
back for each tool call, in order, so a test can check that a deny reason reached the model word
for word.

APIs: OpenAI-compatible chat completions (``POST /v1/chat/completions``, streaming or not: Pi,
OpenCode), Gemini ``:streamGenerateContent``/``:generateContent`` (Gemini CLI). ``mode``:
``"ok"``, ``"429"`` (every request answered 429 with ``retry-after``), ``"529"`` (Anthropic's
``overloaded_error``), ``"500"``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedModel:
    def __init__(self, steps, mode: str = "ok", per_conversation: bool = False) -> None:
        self.steps = list(steps)
        self.mode = mode
        # per_conversation: each request is answered with the step its own conversation is at
        # (the assistant messages it already holds), so hosts running at once each get the script
        self.per_conversation = per_conversation
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.served = 0  # model requests answered with a script step or the final text
        self.srv: ThreadingHTTPServer | None = None
        self.limit_message = "Rate limit reached; try again in 20s"  # what a 429 says
        self.retry_after = "1"  # the 429's retry-after header (seconds)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> int:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                model._send(self, 200, "application/json", b'{"data": [], "models": []}')

            def do_POST(self):
                model._post(self)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return self.srv.server_address[1]

    def stop(self) -> None:
        if self.srv:
            self.srv.shutdown()
            self.srv.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    # ------------------------------------------------------------------ reading what the host sent
    def model_requests(self) -> list[dict]:
        return [r for r in self.requests if r.get("_kind") in ("chat", "gemini", "responses", "anthropic")]

    def tool_results(self) -> list[str]:
        """The text of every tool result the host sent back, in the order of the tool calls."""
        seen: dict[str, str] = {}
        for r in self.requests:
            for m in r.get("messages") or []:  # OpenAI chat
                if m.get("role") == "tool":
                    c = m.get("content")
                    text = c if isinstance(c, str) else json.dumps(c)
                    seen.setdefault(str(m.get("tool_call_id")), text)
            for item in r.get("input") or [] if isinstance(r.get("input"), list) else []:  # Responses API
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    out = item.get("output")
                    seen.setdefault(str(item.get("call_id")), out if isinstance(out, str) else json.dumps(out))
            for m in r.get("messages") or [] if r.get("_kind") == "anthropic" else []:  # Anthropic Messages
                for b in m.get("content") or [] if isinstance(m.get("content"), list) else []:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        c = b.get("content")
                        text = c if isinstance(c, str) else " ".join(x.get("text", "") for x in c or []
                                                                     if isinstance(x, dict))
                        seen.setdefault(str(b.get("tool_use_id")), text)
            for c in r.get("contents") or []:  # Gemini
                for p in c.get("parts") or []:
                    fr = p.get("functionResponse")
                    if fr:
                        seen.setdefault(str(fr.get("id") or fr.get("name")) + str(len(seen)) if not fr.get("id")
                                        else str(fr.get("id")), json.dumps(fr.get("response")))
        return list(seen.values())

    # ------------------------------------------------------------------ answering
    def _send(self, h, code: int, ctype: str, body: bytes, headers: dict | None = None) -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def _next(self, body: dict | None = None) -> dict:
        with self.lock:
            i = self.served
            self.served += 1
        if self.per_conversation and body is not None:
            i = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        return self.steps[i] if i < len(self.steps) else {"text": "done."}

    def _post(self, h) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw}
        path = h.path
        kind = "chat" if "chat/completions" in path else "gemini" if "generatecontent" in path.lower() else \
            "responses" if path.split("?")[0].rstrip("/").endswith("/responses") else \
            "anthropic" if path.split("?")[0].rstrip("/").endswith("/v1/messages") else "other"
        if kind in ("anthropic", "chat") and not body.get("tools"):
            kind = "utility"  # side requests (Claude Code's and OpenCode's titles, summaries): never a script step
        body = dict(body, path=path, _kind=kind)
        with self.lock:
            self.requests.append(body)
        if kind == "utility":
            if "chat/completions" in path:
                return self._chat(h, body, {"text": "a title"})
            return self._anthropic(h, body, {"text": "ok"}, counted=False)
        if kind == "other":
            if "count_tokens" in path:
                return self._send(h, 200, "application/json", b'{"input_tokens": 10}')
            if "countTokens" in path:
                return self._send(h, 200, "application/json", b'{"totalTokens": 10}')
            return self._send(h, 404, "application/json", b'{"error": {"message": "not scripted"}}')
        if self.mode == "429":
            err = {"error": {"message": self.limit_message, "type": "rate_limit_exceeded",
                             "code": 429, "status": "RESOURCE_EXHAUSTED"}}
            return self._send(h, 429, "application/json", json.dumps(err).encode(), {"retry-after": self.retry_after})
        if self.mode == "529":  # Anthropic's "Overloaded": the provider, not the account, is out of capacity
            err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return self._send(h, 529, "application/json", json.dumps(err).encode())
        if self.mode == "500":
            return self._send(h, 500, "application/json", b'{"error": {"message": "internal"}}')
        step = self._next(body)
        if kind == "chat":
            return self._chat(h, body, step)
        if kind == "responses":
            return self._responses(h, body, step)
        if kind == "anthropic":
            return self._anthropic(h, body, step)
        return self._gemini(h, body, step, stream="stream" in path.lower())

    def _chat(self, h, req: dict, step: dict) -> None:
        n = self.served
        if "tool" in step:
            delta = {"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": f"call_{n}", "type": "function",
                "function": {"name": step["tool"], "arguments": json.dumps(step["args"])}}]}
            finish = "tool_calls"
        else:
            delta = {"role": "assistant", "content": step["text"]}
            finish = "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        base = {"id": f"c{n}", "created": 0, "model": req.get("model") or "m1"}
        if not req.get("stream"):
            msg = {k: v for k, v in delta.items() if k != "index"}
            if "tool_calls" in msg:
                msg["tool_calls"] = [{k: v for k, v in tc.items() if k != "index"} for tc in msg["tool_calls"]]
            doc = {**base, "object": "chat.completion",
                   "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage}
            return self._send(h, 200, "application/json", json.dumps(doc).encode())
        chunks = [{**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                          "finish_reason": None}]},
                  {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                                          "finish_reason": finish}]},
                  {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}]
        data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        self._send(h, 200, "text/event-stream", data)

    def _anthropic(self, h, req: dict, step: dict, counted: bool = True) -> None:
        n = self.served
        if "tool" in step:
            block = {"type": "tool_use", "id": f"toolu_{n}", "name": step["tool"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(step["args"])}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": step["text"]}
            stop = "end_turn"
        msg = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": req.get("model") or "claude",
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 0,
                         "cache_creation_input_tokens": 0}}
        if not req.get("stream"):
            full = dict(msg, content=[dict(block, input=step["args"]) if "tool" in step else dict(block, text=step["text"])],
                        stop_reason=stop, usage=dict(msg["usage"], output_tokens=10))
            return self._send(h, 200, "application/json", json.dumps(full).encode())
        events = [("message_start", {"message": msg}),
                  ("content_block_start", {"index": 0, "content_block": block}),
                  ("content_block_delta", {"index": 0, "delta": delta}),
                  ("content_block_stop", {"index": 0}),
                  ("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 10}}),
                  ("message_stop", {})]
        data = b"".join(f"event: {e}\ndata: {json.dumps(dict(d, type=e))}\n\n".encode() for e, d in events)
        self._send(h, 200, "text/event-stream", data)

    def _responses(self, h, req: dict, step: dict) -> None:
        n = self.served
        if "tool" in step:
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": step["tool"],
                    "arguments": json.dumps(step["args"]), "status": "completed"}
        else:
            item = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": step["text"], "annotations": []}]}
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
        events = [("response.created", {"response": {"id": f"resp_{n}"}}),
                  ("response.output_item.added", {"output_index": 0, "item": item}),
                  ("response.output_item.done", {"output_index": 0, "item": item}),
                  ("response.completed", {"response": {"id": f"resp_{n}", "usage": usage}})]
        data = b"".join(f"event: {e}\ndata: {json.dumps(dict(d, type=e))}\n\n".encode() for e, d in events)
        self._send(h, 200, "text/event-stream", data)

    def _gemini(self, h, req: dict, step: dict, stream: bool) -> None:
        if "tool" in step:
            part = {"functionCall": {"name": step["tool"], "args": step["args"]}}
        else:
            part = {"text": step["text"]}
        doc = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
               "modelVersion": "gemini-2.5-pro"}
        data = json.dumps(doc).encode()
        if stream:
            return self._send(h, 200, "text/event-stream", b"data: " + data + b"\r\n\r\n")
        self._send(h, 200, "application/json", data)
