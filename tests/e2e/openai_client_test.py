"""End-to-end checks of `dflash serve` with the official openai client and curl.

Run through tests/e2e/openai_client_test.sh (it makes the venv). For the tiny default fixture pair
(random weights), at temperature 0, with and without the drafter:
  - streamed deltas concatenated == the non-streamed text == `dflash run --json` text, for chat
    (`dflash run --chat`) and completions; usage prompt / completion counts == dflash run's;
  - `"speculative": {"enabled": false}` gives the same text with zero drafted tokens; with the
    drafter on, drafts happen;
  - tools are accepted and rendered by the template; n = 2 gives two equal choices at T = 0;
  - errors through the client: 400 (wrong type, names the param), 401, 404 (unknown model);
  - curl: /health 200 without a key, /ready 200, /metrics has the dflash: series and returns to 0
    running / 0 KV, 401 without the key, 404 unknown path, 413 over --max-body;
  - SIGTERM: exit status 0.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

KEY = "e2e-key"
FAILURES = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(*args):
    r = subprocess.run(["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", *args],
                       capture_output=True, text=True, timeout=60)
    return int(r.stdout or 0), r.stderr


def run_cli(dflash, model, draft, prompt, max_tokens, chat):
    cmd = [dflash, "run", "--model", model, "--prompt", prompt, "--max-tokens", str(max_tokens),
           "--temperature", "0", "--threads", "2", "--json"]
    if draft:
        cmd += ["--draft", draft]
    if chat:
        cmd += ["--chat"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out)


class Server:
    def __init__(self, dflash, model, draft, name):
        self.port = free_port()
        cmd = [dflash, "serve", "--model", model, "--port", str(self.port), "--api-key", KEY,
               "--served-model-name", name, "--threads", "2", "--max-seqs", "4", "--ctx-size", "512",
               "--max-body", "64K", "--drain-timeout", "10"]
        if draft:
            cmd += ["--draft", draft]
        self.log = tempfile.NamedTemporaryFile(prefix="dflash_serve_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dflash serve exited with {self.proc.returncode}: {self.read_log()}")
            try:
                with urllib.request.urlopen(self.base + "/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        else:
            raise RuntimeError("dflash serve did not become ready: " + self.read_log())
        self.client = openai.OpenAI(base_url=self.base + "/v1", api_key=KEY, max_retries=0, timeout=120)

    def read_log(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed"
        check(rc == 0, f"SIGTERM → exit 0 (got {rc})")
        os.unlink(self.log.name)


def spec(resp):
    return resp.model_dump()["metrics"]["speculative_decoding"]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def exercise(srv, name, dflash, model, draft):
    tag = "drafter" if draft else "target-only"
    c = srv.client
    check([m.id for m in c.models.list().data] == [name], f"[{tag}] /v1/models lists {name}")

    prompts = ["The quick brown fox", "Write a haiku about the sea."]
    for chat in (True, False):
        kind = "chat" if chat else "completions"
        for prompt in prompts:
            ref = run_cli(dflash, model, draft, prompt, 24, chat)
            if chat:
                msgs = [{"role": "user", "content": prompt}]
                whole = c.chat.completions.create(model=name, messages=msgs, max_tokens=24, temperature=0)
                text = whole.choices[0].message.content or ""
                stream = c.chat.completions.create(model=name, messages=msgs, max_tokens=24, temperature=0,
                                                   stream=True, stream_options={"include_usage": True})
                parts, usage = [], None
                for ch in stream:
                    if ch.usage:
                        usage = ch.usage
                    for choice in ch.choices:
                        if choice.delta and choice.delta.content:
                            parts.append(choice.delta.content)
                off = c.chat.completions.create(model=name, messages=msgs, max_tokens=24, temperature=0,
                                                extra_body={"speculative": {"enabled": False}})
                off_text = off.choices[0].message.content or ""
            else:
                whole = c.completions.create(model=name, prompt=prompt, max_tokens=24, temperature=0)
                text = whole.choices[0].text
                stream = c.completions.create(model=name, prompt=prompt, max_tokens=24, temperature=0,
                                              stream=True, stream_options={"include_usage": True})
                parts, usage = [], None
                for ch in stream:
                    if ch.usage:
                        usage = ch.usage
                    for choice in ch.choices:
                        parts.append(choice.text or "")
                off = c.completions.create(model=name, prompt=prompt, max_tokens=24, temperature=0,
                                           extra_body={"speculative": {"enabled": False}})
                off_text = off.choices[0].text
            what = f"[{tag}] {kind} {prompt!r}"
            check("".join(parts) == text, f"{what}: streamed == whole ({text!r})")
            check(text == ref["text"], f"{what}: whole == dflash run ({ref['text']!r})")
            check(off_text == text, f"{what}: speculative off gives the same text")
            check(spec(off)["num_draft_tokens"] == 0, f"{what}: speculative off drafts nothing")
            if draft:
                check(spec(whole)["num_spec_steps"] > 0, f"{what}: the drafter ran ({spec(whole)})")
            check(whole.usage.prompt_tokens == ref["stats"]["prompt_tokens"],
                  f"{what}: usage.prompt_tokens {whole.usage.prompt_tokens} == {ref['stats']['prompt_tokens']}")
            check(whole.usage.completion_tokens == ref["stats"]["generated_tokens"],
                  f"{what}: usage.completion_tokens {whole.usage.completion_tokens} == "
                  f"{ref['stats']['generated_tokens']}")
            check(whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens,
                  f"{what}: usage.total_tokens")
            check(usage is not None and usage.model_dump() == whole.usage.model_dump(),
                  f"{what}: streamed usage == whole usage")

    # Tools go through the template; n = 2 at T = 0 gives equal choices.
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                                "parameters": {"type": "object",
                                                               "properties": {"city": {"type": "string"}}}}}]
    r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                  tools=tools, max_tokens=16, temperature=0)
    check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"[{tag}] tools accepted")
    r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], n=2,
                                  max_tokens=8, temperature=0)
    check(len(r.choices) == 2 and r.choices[0].message.content == r.choices[1].message.content,
          f"[{tag}] n=2 gives two equal choices at T=0")

    # Errors through the client.
    try:
        c.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}], temperature="hot")
        check(False, f"[{tag}] wrong type → 400")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("param") == "temperature", f"[{tag}] wrong type → 400 param temperature")
    try:
        c.completions.create(model="no-such-model", prompt="x", max_tokens=2)
        check(False, f"[{tag}] unknown model → 404")
    except openai.NotFoundError:
        check(True, f"[{tag}] unknown model → 404")
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check(False, f"[{tag}] bad key → 401")
    except openai.AuthenticationError:
        check(True, f"[{tag}] bad key → 401")

    # curl.
    b = srv.base
    check(curl(b + "/health")[0] == 200, f"[{tag}] curl /health → 200 without a key")
    check(curl(b + "/ready")[0] == 200, f"[{tag}] curl /ready → 200")
    check(curl(b + "/v1/models")[0] == 401, f"[{tag}] curl /v1/models without a key → 401")
    check(curl("-H", f"Authorization: Bearer {KEY}", b + "/v1/nope")[0] == 404, f"[{tag}] curl unknown path → 404")
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(b'{"prompt": "' + b"x" * (100 * 1024) + b'"}')
        f.flush()
        code, _ = curl("-H", f"Authorization: Bearer {KEY}", "-H", "Content-Type: application/json",
                       "--data-binary", "@" + f.name, b + "/v1/completions")
        check(code == 413, f"[{tag}] curl body over --max-body → 413 (got {code})")
    code, body = curl(b + "/metrics")
    check(code == 200 and "dflash:spec_decode_num_drafts_total{" in body and
          "dflash:time_to_first_token_seconds_bucket{" in body, f"[{tag}] curl /metrics has the dflash: series")
    check(metric(body, "dflash:num_requests_running") == 0 and metric(body, "dflash:kv_cache_usage_perc") == 0,
          f"[{tag}] /metrics back to 0 running, 0 KV")
    check((metric(body, "dflash:generation_tokens_total") or 0) > 0, f"[{tag}] generation_tokens_total > 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    model = os.path.join(a.root, "tests/fixtures/default/target")
    draft = os.path.join(a.root, "tests/fixtures/default/draft")
    for d in (draft, None):
        srv = Server(a.dflash, model, d, "tiny")
        try:
            exercise(srv, "tiny", a.dflash, model, d)
        except Exception as e:  # report, then still stop the server
            check(False, f"unexpected {type(e).__name__}: {e}\n--- server log ---\n{srv.read_log()}")
        finally:
            srv.stop()
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED", file=sys.stderr)
        sys.exit(1)
    print("\nall checks passed")


if __name__ == "__main__":
    main()
