"""A local OpenAI-compatible chat-completions server for tests and demos.

    python testkit/fakellm.py --port 8400 [--mode echo|bad-env|bad-cite|bad-value|error|slow]

The default "echo" mode answers with a faithful rephrasing built from the request's own diagnosis, so the
guard accepts it; other modes return answers the guard must reject, HTTP 500s, or no answer in time."""
from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def faithful(request: dict[str, Any]) -> dict[str, Any]:
    """Rephrase the diagnosis in the request using only its own words and values."""
    user = request["messages"][-1]["content"]
    data = json.loads(user[user.index("<data>") + 6: user.rindex("</data>")])
    korean = "Korean" in request["messages"][0]["content"]
    d = data["diagnosis"]
    top = d["findings"][0]
    summary = (f"근본 원인은 {top['symptom']}입니다: {top['title']}" if korean
               else f"The root cause is {top['symptom']}: {top['title']}")
    steps = [{"id": s["id"], "text": ("조치: " if korean else "Do this: ") + s["text"]} for s in d["steps"]]
    cites = sorted({c for s in d["steps"] for c in s["cite"]})
    return {"summary": summary, "steps": steps, "citations": cites}


def mutate(mode: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def fn(request):
        a = faithful(request)
        if mode == "bad-env":
            a["steps"][0]["text"] += " Also export NCCL_ALGO=Tree to be safe."
        elif mode == "bad-cite":
            a["citations"].append("efa#made-up-section")
        elif mode == "bad-value":
            a["steps"][0]["text"] = re.sub(r"→ (\d+)", lambda m: f"→ {int(m.group(1)) + 7}", a["steps"][0]["text"])
            a["steps"][0]["text"] += " Set --micro-batch-size to 1."
        elif mode == "drop-step":
            a["steps"] = a["steps"][1:]
        return a
    return fn


class FakeLLM:
    def __init__(self, mode: str = "echo", port: int = 0, delay: float = 0.0,
                 reply: Callable[[dict[str, Any]], dict[str, Any]] | None = None):
        self.mode = mode
        self.reply = reply   # a test's own answer, built from the request (a hostile model, an echo)
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.raw.append(raw)
                req = json.loads(raw)
                fake.requests.append(req)
                if fake.mode == "error":
                    return self._send(500, {"error": {"message": "upstream exploded", "type": "server_error"}})
                if fake.mode == "json-object-only" and (req.get("response_format") or {}).get("type") == "json_schema":
                    # llama-cpp-python's server: OpenAI's json_schema form is a validation error (its message)
                    return self._send(500, {"error": {"message": "1 validation error: {'type': 'literal_error', 'loc': "
                                                      "('body', 'response_format', 'type'), 'msg': \"Input should be "
                                                      "'text' or 'json_object'\"}", "type": "internal_server_error"}})
                if fake.mode == "slow" or fake.delay:
                    time.sleep(fake.delay or 5)
                if fake.mode == "garbage":
                    content = "Sure! Here is my answer without any JSON."
                elif fake.mode == "length":   # the reply ran into max_tokens: its JSON never closes
                    content = json.dumps(mutate("echo")(req), ensure_ascii=False)[:60]
                else:
                    content = json.dumps((fake.reply or mutate(fake.mode))(req), ensure_ascii=False)
                self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                                 "model": req.get("model", "fake"), "choices": [{"index": 0, "finish_reason":
                                 "length" if fake.mode == "length" else "stop",
                                 "message": {"role": "assistant", "content": content}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def _send(self, status, obj):
                body = json.dumps(obj, ensure_ascii=False).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return H


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8400)
    ap.add_argument("--mode", default="echo",
                    choices=["echo", "bad-env", "bad-cite", "bad-value", "drop-step", "error", "slow", "garbage",
                             "json-object-only", "length"])
    a = ap.parse_args(argv)
    fake = FakeLLM(a.mode, a.port)
    print(f"fake OpenAI-compatible API at {fake.url} (mode {a.mode})", file=sys.stderr)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
