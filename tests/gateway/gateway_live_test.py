"""`mocker gateway` in front of two real `mocker serve` processes (ephemeral ports), driven by
real HTTP clients: Python's http.client and curl. Covers both APIs streaming and not, usage and
re-tokenization, prefix-cache hits, X-Request-Id, client abort -> cancel on the worker, API keys,
and hostile HTTP (malformed JSON, wrong types, invalid UTF-8, huge body, header flood,
slowloris) answered with clear errors while other clients are served.

Nothing sleeps to wait for an event: every wait polls with a deadline.
"""

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "node")  # the openai SDK, installed by scripts/dev (npm ci)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))

from fault_harness import (EPHEMERAL, ORPHAN_GUARD, STARTUP_TIMEOUT_S, WAIT_S,  # noqa: E402
                           MockerClient, Serve, mocker_bin, paced, poll_until)


class Gateway:
    """A `mocker gateway` child process on an ephemeral port, in front of `serves` (--connect)
    and whatever `flags` name (--fleet ...)."""

    def __init__(self, serves, *flags):
        args = ["--port", "0"]
        for s in serves:
            args += ["--connect", s.submit, "--connect-cancel", s.cancel]
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*ORPHAN_GUARD, mocker_bin(), "gateway", *args, *flags],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.stderr)
        ready, _, _ = select.select([self.proc.stdout], [], [], STARTUP_TIMEOUT_S)
        line = self.proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("http://"):
            self.close()
            raise AssertionError("gateway printed no URL: %r %s" % (line, self.stderr_text()))
        self.host, port = line[len("http://"):].rsplit(":", 1)
        self.port = int(port)
        poll_until(lambda: self.request("GET", "/ready")[0] == 200, "gateway /ready")

    def connection(self, timeout=WAIT_S):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        """(status, headers dict, body bytes) of one request on a fresh connection."""
        c = self.connection()
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers=headers or {})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def metric(self, name):
        """The value of an unlabelled metric line of /metrics."""
        _, _, body = self.request("GET", "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError("no %s in /metrics" % name)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                code = self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("gateway did not exit on SIGTERM")
            assert code == 0, "gateway exited %s: %s" % (code, self.stderr_text())
        self.proc.stdout.close()
        self.stderr.close()


class FleetServe(Serve):
    """A `mocker serve --fleet-file` process (any number of workers) and its fleet file."""

    def __init__(self, *flags):
        fd, self.fleet_file = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        super().__init__("--fleet-file", self.fleet_file, *flags)
        self.http = self.endpoints["http"]

    def per_worker(self, metric, **only):
        """{worker label: value} of a counter of the process's /metrics, summed over the lines
        whose labels include `only` (finished_reason="length", ...)."""
        host, port = self.http[len("http://"):].rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
        try:
            c.request("GET", "/metrics")
            body = c.getresponse().read().decode()
        finally:
            c.close()
        out = {}
        for line in body.splitlines():
            if line.startswith(metric + "{") or line.startswith(metric + " "):
                labels = dict(kv.split("=", 1) for kv in
                              line[line.find("{") + 1:line.find("}")].split(",") if "=" in kv)
                if any(labels.get(k, "").strip('"') != v for k, v in only.items()):
                    continue
                worker = labels.get("worker", '"0"').strip('"')
                out[worker] = out.get(worker, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def close(self):
        try:
            super().close()
        finally:
            os.unlink(self.fleet_file)


def sse_payloads(raw):
    """The payloads of `data: ...` frames, in order (the last is "[DONE]")."""
    out = []
    for frame in raw.decode().split("\n\n"):
        if frame:
            assert frame.startswith("data: "), frame
            out.append(frame[len("data: "):])
    return out


class GatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Paced workers (2 ms per decode pass) so a stream lasts long enough to abort.
        flags = paced(2, 2)
        cls.serves = [Serve(*flags), Serve(*flags)]
        cls.gw = Gateway(cls.serves, "--max-body-bytes", "65536", "--read-timeout-s", "2",
                         "--output-len-mean", "8", "--output-len-stddev", "3")

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        for s in cls.serves:
            s.close()

    def post(self, path, body, headers=None):
        status, hdrs, raw = self.gw.request("POST", path, body, headers)
        return status, hdrs, raw

    def tokenize(self, text):
        status, _, raw = self.post("/tokenize", {"prompt": text})
        self.assertEqual(status, 200, raw)
        return json.loads(raw)["count"]

    def test_models_health_ready(self):
        status, _, raw = self.gw.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        models = json.loads(raw)
        self.assertEqual(models["object"], "list")
        self.assertEqual(models["data"][0]["id"], "mocker")
        self.assertEqual(self.gw.request("GET", "/health")[0], 200)
        status, _, raw = self.gw.request("GET", "/ready")
        self.assertEqual((status, json.loads(raw)["workers_ready"]), (200, 2))

    def test_completion_reports_usage_that_retokenizes(self):
        status, hdrs, raw = self.post("/v1/completions",
                                      {"model": "mocker", "prompt": "Hello big world",
                                       "max_tokens": 7, "ignore_eos": True},
                                      {"X-Request-Id": "req-42"})
        self.assertEqual(status, 200, raw)
        self.assertEqual(hdrs.get("X-Request-Id"), "req-42")
        body = json.loads(raw)
        self.assertEqual(body["id"], "cmpl-req-42")
        self.assertEqual(body["object"], "text_completion")
        choice = body["choices"][0]
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual(body["usage"]["prompt_tokens"], 3)
        self.assertEqual(body["usage"]["completion_tokens"], 7)
        self.assertEqual(body["usage"]["total_tokens"], 10)
        self.assertIn("cached_tokens", body["usage"]["prompt_tokens_details"])
        self.assertEqual(self.tokenize(choice["text"]), 7)
        status, _, raw = self.post("/detokenize", {"tokens": [1, 31]})
        self.assertEqual(json.loads(raw), {"prompt": " t1 t1f"})

    def test_without_ignore_eos_lengths_follow_the_seeded_model(self):
        lengths = []
        for seed in (1, 1, 2, 3, 4, 5):
            status, _, raw = self.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 30,
                                                           "seed": seed})
            self.assertEqual(status, 200, raw)
            body = json.loads(raw)
            n = body["usage"]["completion_tokens"]
            self.assertEqual(body["choices"][0]["finish_reason"], "stop" if n < 30 else "length")
            lengths.append(n)
        self.assertEqual(lengths[0], lengths[1])  # same seed, same length
        self.assertTrue(all(1 <= n <= 30 for n in lengths), lengths)

    def test_prompt_batches_and_n_give_one_choice_each(self):
        status, _, raw = self.post("/v1/completions", {"prompt": ["one two", [7, 8, 9]], "n": 2,
                                                       "max_tokens": 3, "ignore_eos": True})
        self.assertEqual(status, 200, raw)
        body = json.loads(raw)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2, 3])
        self.assertTrue(all(self.tokenize(c["text"]) == 3 for c in body["choices"]))
        self.assertEqual(body["usage"]["prompt_tokens"], 2 + 3)  # each prompt once
        self.assertEqual(body["usage"]["completion_tokens"], 4 * 3)

    def test_a_stop_string_ends_the_choice_and_cancels_its_worker_request(self):
        # Every generated token is spelled " t<hex>": the stop string " t" matches at once.
        status, _, raw = self.post("/v1/completions", {"prompt": "x", "max_tokens": 8000,
                                                       "ignore_eos": True, "stop": [" t"]})
        self.assertEqual(status, 200, raw)
        choice = json.loads(raw)["choices"][0]
        self.assertEqual((choice["text"], choice["finish_reason"], choice["stop_reason"]),
                         ("", "stop", " t"))
        clients = [srv.client() for srv in self.serves]
        try:
            poll_until(lambda: sum(c.stats()["routes"] for c in clients) == 0,
                       "the stopped request cancelled on its worker")
        finally:
            for c in clients:
                c.close()

    def test_chat_stream_with_usage(self):
        body = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 5,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        status, hdrs, raw = self.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, raw)
        self.assertTrue(hdrs["Content-Type"].startswith("text/event-stream"))
        payloads = sse_payloads(raw)
        self.assertEqual(payloads[-1], "[DONE]")
        chunks = [json.loads(p) for p in payloads[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        self.assertEqual([c["choices"][0]["finish_reason"] for c in finals], ["length"])
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], 5)
        self.assertEqual(self.tokenize(text), 5)
        _, _, raw = self.post("/tokenize", {"messages": body["messages"]})
        self.assertEqual(usage["usage"]["prompt_tokens"], json.loads(raw)["count"])

    def test_curl_streams_a_completion(self):
        out = subprocess.run(
            ["curl", "-sS", "-N", "--max-time", str(WAIT_S),
             "http://%s:%d/v1/completions" % (self.gw.host, self.gw.port),
             "-H", "Content-Type: application/json",
             "-d", json.dumps({"prompt": "Say hi", "max_tokens": 4, "ignore_eos": True,
                               "stream": True})],
            check=True, capture_output=True, timeout=WAIT_S + 5).stdout
        payloads = sse_payloads(out)
        self.assertEqual(payloads[-1], "[DONE]")
        chunks = [json.loads(p) for p in payloads[:-1]]
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        self.assertEqual(self.tokenize("".join(c["choices"][0]["text"] for c in chunks)), 4)

    def test_expect_100_continue_gets_the_interim_response(self):
        # curl waits up to --expect100-timeout for "100 Continue" before sending the body.
        out = subprocess.run(
            ["curl", "-sv", "--expect100-timeout", "60", "--max-time", str(WAIT_S),
             "http://%s:%d/v1/completions" % (self.gw.host, self.gw.port),
             "-H", "Content-Type: application/json", "-H", "Expect: 100-continue",
             "-d", json.dumps({"prompt": " ".join(["long"] * 600), "max_tokens": 2})],
            check=True, capture_output=True, timeout=WAIT_S + 5)
        self.assertIn(b"< HTTP/1.1 100 Continue", out.stderr)
        self.assertEqual(json.loads(out.stdout)["usage"]["prompt_tokens"], 600)

    def test_keep_alive_serves_several_requests_on_one_connection(self):
        c = self.gw.connection()
        try:
            for i in range(3):
                c.request("POST", "/v1/completions",
                          body=json.dumps({"prompt": "x %d" % i, "max_tokens": 2}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                json.loads(r.read())
        finally:
            c.close()

    def test_repeated_prompt_hits_the_prefix_cache(self):
        prompt = list(range(1000, 1000 + 96))  # several KV blocks
        cached = []
        for _ in range(4):  # round robin over 2 workers: each sees it twice
            status, _, raw = self.post("/v1/completions", {"prompt": prompt, "max_tokens": 1})
            self.assertEqual(status, 200, raw)
            cached.append(json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertGreater(max(cached[2:]), 0, cached)

    def test_client_abort_cancels_on_the_worker(self):
        before = self.gw.metric("dynamo_frontend_disconnects_total")
        s = socket.create_connection((self.gw.host, self.gw.port), timeout=WAIT_S)
        body = json.dumps({"prompt": "a long story", "max_tokens": 8000, "ignore_eos": True,
                           "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        first = s.recv(4096)
        self.assertIn(b"200 OK", first)
        # The request runs on one of the workers.
        clients = [srv.client() for srv in self.serves]
        try:
            poll_until(lambda: sum(c.stats()["routes"] for c in clients) == 1,
                       "the stream running on a worker")
            s.close()
            poll_until(lambda: sum(c.stats()["routes"] for c in clients) == 0,
                       "the worker request cancelled after the client went away")
        finally:
            for c in clients:
                c.close()
        poll_until(lambda: self.gw.metric("dynamo_frontend_disconnects_total") == before + 1,
                   "the disconnect counted")

    def test_the_openai_node_sdk(self):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            self.skipTest("the openai SDK is not installed: (cd %s && npm ci)" % NODE_DIR)
        clients = [srv.client() for srv in self.serves]
        proc = subprocess.Popen(["node", os.path.join(NODE_DIR, "openai_sdk_test.mjs"),
                                 "http://%s:%d" % (self.gw.host, self.gw.port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=NODE_DIR)
        try:
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err.decode())
            steps = {s["step"]: s for s in map(json.loads, out.decode().splitlines())}
            self.assertEqual(set(steps), {"models", "completion", "chat", "chat_stream",
                                          "aborted"})
            self.assertEqual(self.tokenize(steps["completion"]["text"]), 6)
            self.assertEqual(self.tokenize(steps["chat_stream"]["text"]), 5)
            # The aborted stream is cancelled on its worker.
            poll_until(lambda: sum(c.stats()["routes"] for c in clients) == 0,
                       "the SDK-aborted stream cancelled on the worker")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for c in clients:
                c.close()

    def assert_error(self, status, raw, expected_status, param=None, says=None):
        self.assertEqual(status, expected_status, raw)
        err = json.loads(raw)["error"]
        self.assertEqual(err["code"], expected_status)
        if param is not None:
            self.assertEqual(err["param"], param, err)
        if says is not None:
            self.assertIn(says, err["message"])

    def test_bad_requests_get_clear_errors(self):
        status, _, raw = self.post("/v1/completions", b'{"prompt": "x", ')
        self.assert_error(status, raw, 400, says="invalid JSON")
        status, _, raw = self.post("/v1/completions", b'{"prompt": "\xff\xfe"}')
        self.assert_error(status, raw, 400, says="invalid JSON")
        status, _, raw = self.post("/v1/completions", {"prompt": "x", "max_tokens": "9"})
        self.assert_error(status, raw, 400, param="max_tokens")
        status, _, raw = self.post("/v1/chat/completions", {"messages": [{"role": "user"}],
                                                            "stream": 1})
        self.assert_error(status, raw, 400, param="stream")
        status, _, raw = self.post("/v1/completions", {"model": "other", "prompt": "x"})
        self.assert_error(status, raw, 404, param="model", says="does not exist")
        status, _, raw = self.gw.request("GET", "/v1/nope")
        self.assert_error(status, raw, 404)
        status, hdrs, raw = self.gw.request("GET", "/v1/completions")
        self.assert_error(status, raw, 405)
        self.assertEqual(hdrs.get("Allow"), "POST")
        status, _, raw = self.post("/v1/completions", b"x" * 70000)
        self.assert_error(status, raw, 413)

    def test_header_flood_gets_431(self):
        headers = {"X-Flood-%d" % i: "v" * 100 for i in range(400)}
        status, _, raw = self.gw.request("GET", "/health", headers=headers)
        self.assert_error(status, raw, 431)

    def test_slowloris_is_closed_while_others_are_served(self):
        slow = socket.create_connection((self.gw.host, self.gw.port), timeout=WAIT_S)
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes
        started = time.monotonic()
        status, _, _ = self.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        self.assertEqual(status, 200)
        ready, _, _ = select.select([slow], [], [], WAIT_S)
        self.assertTrue(ready, "the slow connection was never closed")
        self.assertEqual(slow.recv(100), b"")
        self.assertLess(time.monotonic() - started, WAIT_S)
        slow.close()


class GatewayLimitsTest(unittest.TestCase):
    def test_api_keys_and_inflight_limit(self):
        serve = Serve(*paced(2, 2))
        keys = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
        keys.write("# test keys\nsecret-1\n")
        keys.close()
        gw = Gateway([serve], "--api-key-file", keys.name, "--max-inflight", "1")
        try:
            status, _, raw = gw.request("POST", "/v1/completions", {"prompt": "x"})
            self.assertEqual(status, 401, raw)
            auth = {"Authorization": "Bearer secret-1"}
            status, _, raw = gw.request("POST", "/v1/completions", {"prompt": "x"}, auth)
            self.assertEqual(status, 200, raw)
            self.assertEqual(gw.request("GET", "/health")[0], 200)  # not under /v1
            # One long stream in flight: the next request gets 429.
            s = socket.create_connection((gw.host, gw.port), timeout=WAIT_S)
            body = json.dumps({"prompt": "x", "max_tokens": 8000, "ignore_eos": True,
                               "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                      b"secret-1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            self.assertIn(b"200 OK", s.recv(4096))
            status, _, raw = gw.request("POST", "/v1/completions", {"prompt": "x"}, auth)
            self.assertEqual(status, 429, raw)
            s.close()
            poll_until(lambda: gw.request("POST", "/v1/completions", {"prompt": "x"},
                                          auth)[0] == 200, "the slot freed by the abort")
        finally:
            gw.close()
            serve.close()
            os.unlink(keys.name)

    def test_a_reader_too_slow_for_the_stream_buffer_is_cut_and_cancelled(self):
        # An unpaced worker produces a 150,000-token stream (about 20 MB of SSE, more than the
        # kernel buffers on both ends hold) as fast as it can; the client never reads it.
        serve = Serve("--speedup-ratio", "0")
        gw = Gateway([serve], "--max-stream-buffer-bytes", "4096", "--max-model-len", "200000")
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(WAIT_S)
            s.connect((gw.host, gw.port))
            body = json.dumps({"prompt": "x", "max_tokens": 150000, "ignore_eos": True,
                               "stream": True}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
            poll_until(lambda: gw.metric("dynamo_frontend_disconnects_total") == 1,
                       "the slow reader cut off", timeout=60)
            client = serve.client()
            try:
                poll_until(lambda: client.stats()["routes"] == 0, "its request ended")
            finally:
                client.close()
            # Cut off (and cancelled) long before the end of its stream.
            self.assertLess(gw.metric("dynamo_frontend_output_sequence_tokens_total"), 150000)
            s.close()
            # Everyone else is still served.
            status, _, raw = gw.request("POST", "/v1/completions", {"prompt": "x"})
            self.assertEqual(status, 200, raw)
        finally:
            gw.close()
            serve.close()
    def test_a_request_past_its_timeout_fails_with_504_and_is_cancelled(self):
        serve = Serve(*paced(2, 2))
        gw = Gateway([serve], "--request-timeout-s", "0.5")
        try:
            # 8,000 tokens at 2 ms a pass: far longer than the timeout.
            status, _, raw = gw.request("POST", "/v1/completions",
                                        {"prompt": "x", "max_tokens": 8000, "ignore_eos": True})
            self.assertEqual(status, 504, raw)
            err = json.loads(raw)["error"]
            self.assertEqual(err["type"], "GatewayTimeoutError")
            self.assertIn("timed out", err["message"])
            client = serve.client()
            try:
                poll_until(lambda: client.stats()["routes"] == 0, "the timed-out request cancelled")
            finally:
                client.close()
            status, _, raw = gw.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
            self.assertEqual(status, 200, raw)
        finally:
            gw.close()
            serve.close()

    def test_curve_workers(self):
        keys = tempfile.mkdtemp()
        for name in ("server", "gateway"):
            subprocess.run([mocker_bin(), "keygen", os.path.join(keys, name)], check=True,
                           capture_output=True, timeout=WAIT_S)
        with open(os.path.join(keys, "gateway.pub"), encoding="ascii") as f:
            gateway_public = f.read().strip()
        serve = Serve("--curve", "--server-secret-key-file", os.path.join(keys, "server.key"),
                      "--client-public-keys", gateway_public)
        try:
            # Gateway() waits for /ready: the workers answered over CURVE.
            gw = Gateway([serve], "--curve-server-key-file", os.path.join(keys, "server.pub"),
                         "--curve-secret-key-file", os.path.join(keys, "gateway.key"))
            try:
                status, _, raw = gw.request("POST", "/v1/completions",
                                            {"prompt": "x", "max_tokens": 3, "ignore_eos": True})
                self.assertEqual(status, 200, raw)
                self.assertEqual(json.loads(raw)["usage"]["completion_tokens"], 3)
            finally:
                gw.close()
        finally:
            serve.close()
            for name in os.listdir(keys):
                os.unlink(os.path.join(keys, name))
            os.rmdir(keys)


def read_sse_until(sock, needle, deadline_s=WAIT_S):
    """Bytes read from a raw HTTP socket until `needle` is among them (or the peer closes)."""
    got = b""
    deadline = time.monotonic() + deadline_s
    while needle not in got:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def error_frames(raw):
    """The `data: {"error": ...}` frames of raw chunked SSE bytes, parsed."""
    return [json.loads(line[len(b"data: "):]) for line in raw.split(b"\n")
            if line.startswith(b'data: {"error"')]


def open_stream(gw, max_tokens=200000):
    """A raw streaming completion that runs for minutes; returns the socket once tokens flow."""
    s = socket.create_connection((gw.host, gw.port), timeout=WAIT_S)
    body = json.dumps({"prompt": "long", "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert b'"text"' in read_sse_until(s, b'"text"')
    return s


class WorkerFailureGatewayTest(unittest.TestCase):
    """Workers that fail: one that stops answering (SIGSTOP) is lost after --worker-timeout-s —
    its streams end with a 504 error frame and are cancelled there, /ready says 503, new
    requests go to the other worker, and it is back once it answers; one that shuts down
    mid-stream (SIGTERM) gives a 503 error frame (its `shutdown` terminal), not a 500."""

    def setUp(self):
        self.serves = [Serve(*paced(2, 2)), Serve(*paced(2, 2))]
        self.gw = Gateway(self.serves, "--stats-interval-ms", "100", "--worker-timeout-s", "2",
                          "--max-model-len", "300000")

    def tearDown(self):
        self.gw.close()
        for s in self.serves:
            if s.proc.poll() is None:
                os.kill(s.pid, signal.SIGCONT)
            s.close()

    def holder(self):
        """The serve whose worker runs the one request in flight."""
        clients = [s.client() for s in self.serves]
        try:
            routes = [c.stats()["routes"] for c in clients]
        finally:
            for c in clients:
                c.close()
        self.assertEqual(sorted(routes), [0, 1])
        return self.serves[routes.index(1)]

    def test_a_worker_that_stops_answering_is_lost_and_its_streams_fail_with_504(self):
        s = open_stream(self.gw)
        stuck = self.holder()
        os.kill(stuck.pid, signal.SIGSTOP)
        try:
            got = read_sse_until(s, b"[DONE]")
            frames = error_frames(got)
            self.assertEqual(len(frames), 1, got[-500:])
            err = frames[0]["error"]
            self.assertEqual((err["code"], err["type"]), (504, "GatewayTimeoutError"))
            self.assertIn("stopped answering", err["message"])
            s.close()
            status, _, raw = self.gw.request("GET", "/ready")
            self.assertEqual((status, json.loads(raw)["workers_lost"]), (503, 1))
            for _ in range(3):  # every new request goes to the live worker
                status, _, raw = self.gw.request("POST", "/v1/completions",
                                                 {"prompt": "x", "max_tokens": 2})
                self.assertEqual(status, 200, raw)
        finally:
            os.kill(stuck.pid, signal.SIGCONT)
        poll_until(lambda: self.gw.request("GET", "/ready")[0] == 200, "the worker back")
        client = stuck.client()
        try:
            poll_until(lambda: client.stats()["routes"] == 0, "the lost request cancelled there")
        finally:
            client.close()

    def test_a_worker_shutting_down_mid_stream_gives_a_503_error_frame(self):
        s = open_stream(self.gw)
        self.assertEqual(self.holder().terminate(), 0)
        got = read_sse_until(s, b"[DONE]")
        s.close()
        frames = error_frames(got)
        self.assertEqual(len(frames), 1, got[-500:])
        err = frames[0]["error"]
        self.assertEqual((err["code"], err["type"]), (503, "ServiceUnavailableError"))
        self.assertIn("shutdown", err["message"])


class InjectedErrorGatewayTest(unittest.TestCase):
    """A worker's injected `error` fault (service/README.md "Failure drills") reaches an OpenAI
    client as the HTTP status its protocol code means, with a valid OpenAI error body (a stream:
    one error frame with that code): three workers, each failing every request with another
    code, round robin over them."""

    CODES = {"resource_exhausted": (429, "RateLimitError"),
             "io_error": (503, "ServiceUnavailableError"),
             "internal": (500, "InternalServerError")}

    def setUp(self):
        self.serves = [Serve(*paced(1, 1), "--fault", "error:rate=1:code=" + code)
                       for code in self.CODES]
        self.gw = Gateway(self.serves)

    def tearDown(self):
        self.gw.close()
        for s in self.serves:
            s.close()

    def test_each_code_gets_its_status_and_an_openai_error_body(self):
        seen = {}
        for stream in (False, True):
            for _ in range(len(self.serves)):
                status, headers, raw = self.gw.request(
                    "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": stream})
                if stream:
                    # The SSE head is sent at once (as vLLM does): the error is one frame
                    # carrying the status as its code, then [DONE].
                    self.assertEqual(status, 200, raw)
                    frames = error_frames(raw)
                    self.assertEqual(len(frames), 1, raw)
                    self.assertTrue(raw.endswith(b"data: [DONE]\n\n"), raw)
                    err = frames[0]["error"]
                    status = err["code"]
                else:
                    self.assertEqual(headers.get("Content-Type"), "application/json", raw)
                    err = json.loads(raw)["error"]
                    self.assertEqual(err["code"], status, raw)
                self.assertEqual(set(err), {"message", "type", "param", "code"}, raw)
                self.assertIn("fault injected: error", err["message"])
                code = err["message"].split("(")[1].split(")")[0]  # "worker error (CODE): ..."
                self.assertEqual((status, err["type"]), self.CODES[code], raw)
                seen.setdefault(stream, set()).add(status)
        # Round robin: every worker, so every code, in both forms.
        self.assertEqual(seen, {False: {429, 500, 503}, True: {429, 500, 503}})


TINY_TOKENIZER = os.path.join(os.path.dirname(HERE), "data",
                              "tiny_tokenizer.json")


def reference_token_ids(texts):
    """Token ids of `texts` by Hugging Face's JavaScript tokenizer.json implementation
    (@huggingface/tokenizers, tests/gateway/node), or None where it is not installed."""
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@huggingface", "tokenizers")):
        return None
    r = subprocess.run(["node", os.path.join(NODE_DIR, "tokenizer_check.mjs"), TINY_TOKENIZER],
                       input=json.dumps(texts).encode(), capture_output=True, timeout=WAIT_S,
                       check=True)
    return json.loads(r.stdout)


class TokenizerFileGatewayTest(unittest.TestCase):
    """`--tokenizer tests/data/tiny_tokenizer.json` (a byte-level BPE tokenizer.json): prompt
    counts as the reference implementation counts them, generated text that re-tokenizes to
    the reported count (by the gateway and by the reference), shared text sharing KV blocks."""

    @classmethod
    def setUpClass(cls):
        cls.serve = Serve(*paced(1, 1))
        cls.gw = Gateway([cls.serve], "--tokenizer", TINY_TOKENIZER)

    @classmethod
    def tearDownClass(cls):
        cls.gw.close()
        cls.serve.close()

    def tokenize(self, text):
        status, _, raw = self.gw.request("POST", "/tokenize", {"prompt": text})
        self.assertEqual(status, 200, raw)
        return json.loads(raw)["tokens"]

    def test_prompt_tokens_match_the_reference_implementation(self):
        texts = ["Hello world, the gateway!", "can't 12345 héllo <|im_start|>user\n",
                 "Ünïcödé 😀 text\twith\ttabs", "  spaces   and\n\nnewlines  ",
                 "The quick brown fox jumps over the lazy dog. " * 5]
        ours = [self.tokenize(t) for t in texts]
        reference = reference_token_ids(texts)
        if reference is None:
            self.skipTest("@huggingface/tokenizers not installed (scripts/dev test runs npm ci)")
        self.assertEqual(ours, reference)
        status, _, raw = self.gw.request("POST", "/v1/completions",
                                         {"prompt": texts[0], "max_tokens": 1})
        self.assertEqual(status, 200, raw)
        self.assertEqual(json.loads(raw)["usage"]["prompt_tokens"], len(reference[0]))

    def test_generated_text_retokenizes_to_the_reported_count(self):
        for n in (1, 7, 33):
            status, _, raw = self.gw.request("POST", "/v1/completions",
                                             {"prompt": "Tell me about the workers",
                                              "max_tokens": n, "ignore_eos": True})
            self.assertEqual(status, 200, raw)
            body = json.loads(raw)
            text = body["choices"][0]["text"]
            self.assertEqual(body["usage"]["completion_tokens"], n)
            self.assertEqual(len(self.tokenize(text)), n, text)
            reference = reference_token_ids([text])
            if reference is not None:
                self.assertEqual(len(reference[0]), n, text)

    def test_shared_text_shares_kv_blocks(self):
        shared = "The gateway takes requests from clients that speak the OpenAI protocol. " * 6
        cached = []
        for tail in ("first question?", "second one!"):
            status, _, raw = self.gw.request("POST", "/v1/completions",
                                             {"prompt": shared + tail, "max_tokens": 1})
            self.assertEqual(status, 200, raw)
            cached.append(json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(cached[0], 0)
        self.assertGreater(cached[1], 0)


class KvRouterGatewayTest(unittest.TestCase):
    """`--router kv` over a real two-worker `mocker serve --num-workers 2` fleet: the gateway's
    live KV index follows both workers' KV events, and a repeated prompt goes to the worker
    that holds its prefix (with round robin, the fourth request of this test would not)."""

    def test_repeated_prompts_go_to_the_worker_holding_their_prefix(self):
        fleet = FleetServe("--num-workers", "2", *paced(1, 1))
        try:
            gw = Gateway([], "--fleet", fleet.fleet_file, "--router", "kv")
            try:
                with open(fleet.fleet_file, encoding="utf-8") as f:
                    block = json.load(f)["block_size"]
                # Token-id prompts of 3 full blocks + 1 token; 2 output tokens complete no
                # further block, so the index ends up with exactly 3 blocks per prompt.
                prompts = [[1000 * (i + 1) + k for k in range(3 * block + 1)] for i in range(3)]

                def complete(prompt):
                    status, _, raw = gw.request("POST", "/v1/completions",
                                                {"prompt": prompt, "max_tokens": 2,
                                                 "ignore_eos": True})
                    self.assertEqual(status, 200, raw)
                    return json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"]

                for p in prompts:
                    self.assertEqual(complete(p), 0)
                # The index has seen every worker's stored blocks before the repeats route.
                poll_until(lambda: gw.metric("dynamo_frontend_kv_index_blocks") == 9,
                           "the KV index holding the 9 prompt blocks")
                for _ in range(3):
                    for p in prompts:
                        self.assertEqual(complete(p), 3 * block)
                self.assertEqual(gw.metric("dynamo_frontend_kv_routed_total"), 12)
                self.assertEqual(gw.metric("dynamo_frontend_kv_routed_cached_prefix_total"), 9)
                self.assertEqual(gw.metric("dynamo_frontend_kv_query_failures_total"), 0)
            finally:
                gw.close()
        finally:
            fleet.close()

    def test_kv_needs_the_event_endpoints_of_a_fleet_file(self):
        r = subprocess.run([mocker_bin(), "gateway", "--connect", "tcp://127.0.0.1:5999",
                            "--router", "kv"], capture_output=True, timeout=WAIT_S)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"--router kv needs every worker's KV-event endpoints", r.stderr)


class DisaggregatedGatewayTest(unittest.TestCase):
    """The gateway over real disaggregated workers: one `mocker serve --worker-type prefill`
    and a two-worker `--worker-type decode` fleet. Every request is prefilled on the prefill
    worker, handed off, and decoded on the decode worker the decode router picks. Fresh
    processes per test: the workers' counters are then this test's alone."""

    def setUp(self):
        self.prefill = FleetServe("--worker-type", "prefill", "--handoff-endpoint", EPHEMERAL,
                                  *paced(2, 2))
        self.decode = FleetServe("--worker-type", "decode", "--num-workers", "2", *paced(2, 2))
        self.gw = Gateway([], "--prefill-fleet", self.prefill.fleet_file, "--decode-fleet",
                          self.decode.fleet_file, "--max-model-len", "300000")

    def tearDown(self):
        self.gw.close()
        self.decode.close()
        self.prefill.close()

    def test_requests_run_through_both_hops_round_robin_over_the_decode_workers(self):
        status, _, raw = self.gw.request("GET", "/ready")
        self.assertEqual((status, json.loads(raw)["workers"]), (200, 3))
        for i in range(4):
            status, _, raw = self.gw.request("POST", "/v1/completions",
                                             {"prompt": "disaggregated prompt %d" % i,
                                              "max_tokens": 5, "ignore_eos": True})
            self.assertEqual(status, 200, raw)
            body = json.loads(raw)
            self.assertEqual(body["usage"]["completion_tokens"], 5)
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
        # Round robin: two requests of 5 tokens on each decode worker.
        poll_until(lambda: self.decode.per_worker("vllm:generation_tokens_total")
                   == {"0": 10.0, "1": 10.0}, "10 tokens generated on each decode worker")
        # The prefill worker finished its part of all four (a sent handoff counts as `length`)
        # and generated no token itself.
        poll_until(lambda: self.prefill.per_worker("vllm:request_success_total",
                                                   finished_reason="length") == {"0": 4.0},
                   "four handoffs counted on the prefill worker")
        self.assertEqual(self.prefill.per_worker("vllm:generation_tokens_total"), {"0": 0.0})

    def test_streaming_chat_and_the_prefill_workers_cache(self):
        prompt = {"messages": [{"role": "user", "content": "a shared prefix " * 40}],
                  "max_tokens": 4, "ignore_eos": True, "stream": True,
                  "stream_options": {"include_usage": True}}
        cached = []
        for _ in range(2):
            status, _, raw = self.gw.request("POST", "/v1/chat/completions", prompt)
            self.assertEqual(status, 200, raw)
            frames = sse_payloads(raw)
            self.assertEqual(frames[-1], "[DONE]")
            chunks = [json.loads(f) for f in frames[:-1]]
            self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
            text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks
                           if c["choices"])
            usage = chunks[-1]["usage"]
            self.assertEqual(usage["completion_tokens"], 4)
            _, _, counted = self.gw.request("POST", "/tokenize", {"prompt": text})
            self.assertEqual(json.loads(counted)["count"], 4)
            cached.append(usage["prompt_tokens_details"]["cached_tokens"])
        # The second request's prompt is in the prefill worker's cache (the ticket's count).
        self.assertEqual(cached[0], 0)
        self.assertGreater(cached[1], 0)

    def test_a_client_abort_before_the_end_cancels_on_the_decode_worker(self):
        s = socket.create_connection((self.gw.host, self.gw.port), timeout=WAIT_S)
        # 200,000 tokens at 2 ms a pass: it would run for minutes.
        body = json.dumps({"prompt": "long", "max_tokens": 200000, "ignore_eos": True,
                           "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b'"text"' not in got:  # tokens are flowing: the decode hop runs
            chunk = s.recv(65536)
            self.assertTrue(chunk, "stream closed early")
            got += chunk
        s.close()
        with open(self.decode.fleet_file, encoding="utf-8") as f:
            workers = json.load(f)["workers"]
        clients = [MockerClient.connect(w["submit"], w["cancel"]) for w in workers]
        try:
            poll_until(lambda: all(c.stats()["routes"] == 0 for c in clients),
                       "the decode worker's request cancelled")
        finally:
            for c in clients:
                c.close()


if __name__ == "__main__":
    unittest.main()
