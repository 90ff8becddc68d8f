"""Load and fault test of `dflash serve` (loopback only, bounded; Python standard library only).

64 concurrent clients for --duration seconds (ctest: 12 s; the issue's full run: --duration 60)
against the tiny default fixture pair with the drafter, each looping over:
  70 %  a streamed completion at T = 0 that must finish and equal its solo output;
  20 %  a streamed completion dropped at a random point (the server must cancel it);
  10 %  a malformed body (bad JSON, wrong types, oversized) that must get a 4xx error object.
Then: the server is alive, /metrics shows 0 running, 0 waiting and kv_cache_usage_perc 0, the
RSS grew by at most 5 % between the end of the warm-up and the end, and SIGTERM exits 0.

Usage: python3 tests/e2e/load_fault_test.py --dflash build/dflash --root . [--duration 60]
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

PROMPTS = ["The quick brown fox", "Once upon a time", "def main():", "Numbers: 1, 2, 3,",
           "Dear friend,", "In the beginning", "SELECT * FROM", "The weather today"]
MAX_TOKENS = 24


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def add(self, key, err=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if err and len(self.errors) < 20:
                self.errors.append(err)


def body_for(prompt, stream):
    return json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream,
                       "ignore_eos": True})


def solo(port, prompt):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", body_for(prompt, False), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    assert r.status == 200, data
    return data["choices"][0]["text"]


def streamed(port, prompt, drop_after=None):
    """Text of a streamed completion; with drop_after, closes the socket after that many events."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", body_for(prompt, True), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    text, events, done = "", 0, False
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            break
        ev = json.loads(payload)
        if "error" in ev:
            raise RuntimeError(f"error event: {ev}")
        for ch in ev["choices"]:
            text += ch.get("text") or ""
        events += 1
        if drop_after is not None and events >= drop_after:
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return None
    c.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return text


def malformed(port, rng):
    kind = rng.randrange(4)
    if kind == 0:
        body = b'{"prompt": "x", "max_tokens": '
    elif kind == 1:
        body = json.dumps({"prompt": "x", "temperature": "hot"}).encode()
    elif kind == 2:
        body = b'{"prompt": "' + b"y" * (200 * 1024) + b'"}'
    else:
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if not 400 <= r.status < 500:
            raise RuntimeError(f"malformed body got {r.status}")
        if "error" not in json.loads(data):
            raise RuntimeError("no error object")
    except (ConnectionResetError, BrokenPipeError):
        if kind != 2:  # the server may close on an oversized body before reading it all
            raise
    finally:
        c.close()


def client(port, expected, deadline, stats, seed):
    rng = random.Random(seed)
    while time.time() < deadline:
        prompt = rng.choice(PROMPTS)
        roll = rng.random()
        op = "complete" if roll < 0.7 else "drop" if roll < 0.9 else "malformed"
        try:
            if roll < 0.7:
                t = streamed(port, prompt)
                if t == expected[prompt]:
                    stats.add("complete_ok")
                else:
                    stats.add("complete_mismatch", f"{prompt!r}: {t!r} != {expected[prompt]!r}")
            elif roll < 0.9:
                streamed(port, prompt, drop_after=rng.randrange(1, MAX_TOKENS))
                stats.add("dropped")
            else:
                malformed(port, rng)
                stats.add("malformed_ok")
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            stats.add("client_error", f"{op}: {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dflash", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--duration", type=float, default=12)
    ap.add_argument("--clients", type=int, default=64)
    a = ap.parse_args()
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="dflash_load_", suffix=".log", delete=False)
    proc = subprocess.Popen([a.dflash, "serve", "--model", os.path.join(a.root, "tests/fixtures/default/target"),
                             "--draft", os.path.join(a.root, "tests/fixtures/default/draft"),
                             "--port", str(port), "--threads", "2", "--max-seqs", "16", "--ctx-size", "256",
                             "--max-body", "64K", "--quiet"], stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        expected = {p: solo(port, p) for p in PROMPTS}
        stats = Stats()
        warm = time.time() + min(3.0, a.duration / 4)
        deadline = time.time() + a.duration
        threads = [threading.Thread(target=client, args=(port, expected, deadline, stats, i), daemon=True)
                   for i in range(a.clients)]
        for t in threads:
            t.start()
        while time.time() < warm:
            time.sleep(0.05)
        rss0 = rss_kb(proc.pid)
        for t in threads:
            t.join(timeout=a.duration + 120)
        # Idle: nothing running, no KV in use.
        idle = False
        for _ in range(200):
            with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
                m = r.read().decode()
            if (metric(m, "dflash:num_requests_running") == 0 and metric(m, "dflash:num_requests_waiting") == 0
                    and metric(m, "dflash:kv_cache_usage_perc") == 0):
                idle = True
                break
            time.sleep(0.05)
        rss1 = rss_kb(proc.pid)
        print(f"counts: {stats.counts}")
        print(f"rss after warm-up {rss0} kB, at the end {rss1} kB ({100.0 * (rss1 - rss0) / max(rss0, 1):+.1f} %)")
        if proc.poll() is not None:
            failures.append(f"the server died (exit {proc.returncode})")
        if not idle:
            failures.append("metrics did not return to 0 running / 0 waiting / 0 KV")
        if stats.counts.get("complete_mismatch") or stats.counts.get("client_error"):
            failures.append("client failures: " + "; ".join(stats.errors))
        if not stats.counts.get("complete_ok") or not stats.counts.get("dropped"):
            failures.append("the mix did not run (no completed or no dropped streams)")
        if rss1 > rss0 * 1.05:
            failures.append(f"RSS grew by more than 5 % ({rss0} → {rss1} kB)")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed"
            if rc != 0:
                failures.append(f"SIGTERM → exit {rc}")
        if failures:
            with open(log.name, errors="replace") as f:
                print("--- server log (tail) ---\n" + "".join(f.readlines()[-40:]))
        os.unlink(log.name)
    for f in failures:
        print("FAIL  " + f)
    if failures:
        sys.exit(1)
    print("load/fault test passed")


if __name__ == "__main__":
    main()
