"""`mocker replay --mode live --openai-url URL`: a trace replayed over HTTP against a real
`mocker gateway` in front of a real `mocker serve` (child processes, ephemeral ports), compared
with the same trace over ZeroMQ (--connect) on an identical fresh server; server errors (refused
connection, HTTP 404 with an OpenAI error body, a malformed SSE stream from a stub server) counted
per request with the server's message; a kept-alive connection the server closed retried on a
new one; the flags that do not apply refused as usage errors.

Nothing sleeps to wait for an event: the replay runs to completion and is then read.
"""

import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))

from fault_harness import WAIT_S, Serve, mocker_bin  # noqa: E402
from gateway_live_test import Gateway  # noqa: E402

BLOCK = 16
# Three prefix groups of 3 blocks, each prompt adding a block of its own: requests 2.. share a
# prefix with an earlier one (hash ids 1-3 or 4-6), so a prefix cache finds 48 tokens of them.
ROWS = [
    {"timestamp": 0, "hash_ids": [1, 2, 3, 10], "output_length": 4},
    {"timestamp": 30, "hash_ids": [1, 2, 3, 11], "output_length": 3},
    {"timestamp": 60, "hash_ids": [4, 5, 6, 12], "output_length": 5},
    {"timestamp": 90, "hash_ids": [4, 5, 6, 13], "output_length": 2},
    {"timestamp": 120, "hash_ids": [1, 2, 3, 14], "output_length": 4},
]
for r in ROWS:
    r["input_length"] = BLOCK * len(r["hash_ids"])
SERVE_FLAGS = ("--block-size", str(BLOCK), "--speedup-ratio", "10")


def replay(*args, timeout=WAIT_S * 3):
    return subprocess.run([mocker_bin(), "replay", *args, "--no-progress"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


class TraceFiles:
    def __init__(self, rows):
        self.dir = tempfile.TemporaryDirectory()
        self.trace = os.path.join(self.dir.name, "trace.jsonl")
        with open(self.trace, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def path(self, name):
        return os.path.join(self.dir.name, name)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class OpenAiReplayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.files = TraceFiles(ROWS)

    @classmethod
    def tearDownClass(cls):
        cls.files.dir.cleanup()

    def run_against_gateway(self, name, *flags, serve_flags=SERVE_FLAGS):
        serve = Serve(*serve_flags)
        try:
            gw = Gateway([serve])
            try:
                report, jsonl = self.files.path(name + ".json"), self.files.path(name + ".jsonl")
                r = replay(self.files.trace, "--trace-block-size", str(BLOCK), "--openai-url",
                           "http://%s:%d" % (gw.host, gw.port), "--report-json", report,
                           "--requests-jsonl", jsonl, *flags)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                with open(report) as f:
                    return json.load(f), read_jsonl(jsonl), r.stdout
            finally:
                gw.close()
        finally:
            serve.close()

    def run_over_zeromq(self, name, *flags):
        serve = Serve(*SERVE_FLAGS)
        try:
            jsonl = self.files.path(name + ".jsonl")
            r = replay(self.files.trace, "--trace-block-size", str(BLOCK), "--connect",
                       serve.submit, "--connect-cancel", serve.cancel, "--requests-jsonl", jsonl,
                       *flags)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            return read_jsonl(jsonl)
        finally:
            serve.close()

    def test_trace_timing_counts_equal_the_trace(self):
        # Real-time passes (about 5 ms a token): each token's time is its own chunk's.
        report, requests, out = self.run_against_gateway(
            "timed", serve_flags=("--block-size", str(BLOCK)))
        self.assertEqual(report["num_requests"], len(ROWS))
        self.assertEqual(report["completed_requests"], len(ROWS), out)
        self.assertEqual(report["total_input_tokens"], sum(r["input_length"] for r in ROWS))
        self.assertEqual(report["total_output_tokens"], sum(r["output_length"] for r in ROWS))
        self.assertEqual([q["output_length"] for q in requests], [r["output_length"] for r in ROWS])
        for q in requests:
            self.assertEqual(q["terminal_status"], "completed")
            self.assertLessEqual(q["arrival_time_ms"], q["first_token_ms"])
            self.assertLess(q["first_token_ms"], q["last_token_ms"], q)
        # Sent on the trace's clock: request 4 no earlier than 120 ms after request 0.
        self.assertGreaterEqual(requests[4]["arrival_time_ms"] - requests[0]["arrival_time_ms"],
                                119.0)
        self.assertIn("Live OpenAI: http://", out)
        self.assertIn("prompts as token ids", out)

    def test_shared_prefixes_are_cached_as_over_zeromq(self):
        _, http_requests, _ = self.run_against_gateway("closed", "--concurrency", "1")
        zmq_requests = self.run_over_zeromq("closed-zmq", "--concurrency", "1")
        http_reused = [q["reused_input_tokens"] for q in http_requests]
        self.assertEqual(http_reused, [q["reused_input_tokens"] for q in zmq_requests])
        self.assertEqual(http_reused, [0, 48, 0, 48, 48])

    def test_non_streaming_counts_and_cache_as_streamed_tokens_at_the_body(self):
        report, requests, out = self.run_against_gateway("whole", "--no-stream",
                                                         "--concurrency", "1")
        self.assertEqual(report["completed_requests"], len(ROWS), out)
        self.assertEqual(report["total_input_tokens"], sum(r["input_length"] for r in ROWS))
        self.assertEqual([q["output_length"] for q in requests], [r["output_length"] for r in ROWS])
        self.assertEqual([q["reused_input_tokens"] for q in requests], [0, 48, 0, 48, 48])
        for q in requests:  # one body: every token arrives with it
            self.assertEqual(q["first_token_ms"], q["last_token_ms"], q)
        self.assertIn("completions, not streamed", out)
        self.assertNotIn("OpenAI issues", out)
        chat, chat_requests, out = self.run_against_gateway("whole-chat", "--no-stream", "--chat",
                                                            "--concurrency", "2")
        self.assertEqual(chat["completed_requests"], len(ROWS), out)
        self.assertEqual([q["output_length"] for q in chat_requests],
                         [r["output_length"] for r in ROWS])

    def test_chat_sends_text_and_counts_the_servers_prompt_tokens(self):
        report, requests, out = self.run_against_gateway("chat", "--chat", "--concurrency", "2")
        self.assertEqual(report["completed_requests"], len(ROWS), out)
        self.assertEqual(report["total_output_tokens"], sum(r["output_length"] for r in ROWS))
        self.assertIn("prompts as text (built-in tokenizer)", out)
        # The chat template adds its role tags: the report counts the server's prompt tokens.
        for q, row in zip(requests, ROWS):
            self.assertGreater(q["input_length"], row["input_length"])
        self.assertIn("usage.prompt_tokens differs", out)

    def test_unknown_model_is_counted_with_the_servers_message(self):
        _, requests, out = self.run_against_gateway("nomodel", "--model", "no-such-model",
                                                    "--concurrency", "2")
        self.assertEqual({q["terminal_status"] for q in requests}, {"failed"})
        self.assertIn("(%d x 404)" % len(ROWS), out)
        self.assertIn("no-such-model", out)

    def test_connection_refused_is_counted_per_request(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        jsonl = self.files.path("refused.jsonl")
        r = replay(self.files.trace, "--openai-url", "http://127.0.0.1:%d" % port, "--model",
                   "m", "--concurrency", "2", "--requests-jsonl", jsonl)
        self.assertIn("%d connection failures" % len(ROWS), r.stdout, r.stderr)
        self.assertIn("refused", r.stdout)
        self.assertEqual({q["terminal_status"] for q in read_jsonl(jsonl)}, {"failed"})

    def test_without_model_a_server_that_cannot_be_reached_is_an_error(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        r = replay(self.files.trace, "--openai-url", "http://127.0.0.1:%d" % port)
        self.assertEqual(r.returncode, 1)
        self.assertIn("/v1/models", r.stderr)


@contextlib.contextmanager
def stub_replay(handler, rows, *flags):
    """A stub HTTP server with `handler` on an ephemeral port, `rows` replayed against it with
    `flags`: yields (the finished run, its --requests-jsonl records)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    files = TraceFiles(rows)
    try:
        jsonl = files.path("stub.jsonl")
        r = replay(files.trace, "--openai-url", "http://127.0.0.1:%d/v1" % server.server_port,
                   "--model", "m", "--concurrency", "1", "--requests-jsonl", jsonl, *flags)
        yield r, read_jsonl(jsonl)
    finally:
        server.shutdown()
        server.server_close()
        files.dir.cleanup()


class StubHandler(http.server.BaseHTTPRequestHandler):
    """An OpenAI-ish server whose streams are malformed after one good chunk."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices": [oops\n\n')
        self.wfile.flush()

    def log_message(self, *args):
        pass


class MalformedStreamTest(unittest.TestCase):
    def test_a_malformed_sse_stream_fails_its_request_not_the_run(self):
        with stub_replay(StubHandler, ROWS[:2]) as (r, requests):
            self.assertIn("2 malformed streams", r.stdout, r.stderr)
            self.assertIn("not a JSON object", r.stdout)
            self.assertEqual([q["terminal_status"] for q in requests], ["failed", "failed"])


def answer_one_token(handler):
    """A streamed completion of one token with its usage, sized (Content-Length)."""
    body = (b'data: {"choices":[{"text":"a","finish_reason":"length"}],'
            b'"usage":{"prompt_tokens":16,"completion_tokens":1}}\n\ndata: [DONE]\n\n')
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class ClosingKeepAliveHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 without `Connection: close` that still closes every connection after its
    response, as a server closing idle keep-alive connections does."""
    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self):
        super().setup()
        ClosingKeepAliveHandler.connections += 1

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        answer_one_token(self)
        self.close_connection = True

    def log_message(self, *args):
        pass


class KeepAliveRetryTest(unittest.TestCase):
    def test_a_reused_connection_the_server_closed_is_retried_on_a_new_one(self):
        rows = [{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [i]}
                for i in range(4)]
        with stub_replay(ClosingKeepAliveHandler, rows, "--trace-block-size", "16") as (r, reqs):
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("OpenAI issues", r.stdout)
            self.assertEqual([q["terminal_status"] for q in reqs], ["completed"] * 4)
            self.assertEqual(ClosingKeepAliveHandler.connections, 4)


class KeepAliveHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive: records when each connection was accepted and each request read."""
    protocol_version = "HTTP/1.1"
    events = []

    def setup(self):
        super().setup()
        KeepAliveHandler.events.append("connect")

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        KeepAliveHandler.events.append("request")
        answer_one_token(self)

    def log_message(self, *args):
        pass


class PreconnectTest(unittest.TestCase):
    ROWS = [{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [i]}
            for i in range(4)]

    def run_with(self, *flags):
        KeepAliveHandler.events = []
        with stub_replay(KeepAliveHandler, self.ROWS, "--trace-block-size", "16",
                         *flags) as (r, reqs):
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual([q["terminal_status"] for q in reqs], ["completed"] * 4)
        return list(KeepAliveHandler.events)

    def test_openai_connections_are_open_before_the_first_request(self):
        # One request at a time on keep-alive connections: without the flag one connection
        # carries all four; with it, three are opened before the first request is sent and the
        # requests reuse them (no fourth). (Counts, not order: the server's handler threads may
        # record a connection it accepted late after a request on another.)
        for flags, connections in (((), 1), (("--openai-connections", "3"), 3)):
            events = self.run_with(*flags)
            self.assertEqual((events.count("connect"), events.count("request")),
                             (connections, 4), flags)


def flood(wfile, head, byte, size, tail):
    """Writes `head`, `size` times `byte`, then `tail`; stops quietly when the client hangs up
    (as it should, at its limit)."""
    try:
        wfile.write(head)
        for _ in range(size >> 16):
            wfile.write(byte * (64 << 10))
        wfile.write(tail)
    except (BrokenPipeError, ConnectionResetError):
        pass


class EndlessChunkHeaderHandler(http.server.BaseHTTPRequestHandler):
    """A chunked response whose first chunk header never ends: 8 MiB of chunk extension."""
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        flood(self.wfile, b"1;x=", b"a", 8 << 20, b"")
        self.close_connection = True

    def log_message(self, *args):
        pass


class HostileResponseTest(unittest.TestCase):
    def test_a_chunk_header_that_never_ends_fails_the_request_at_the_buffer_limit(self):
        with stub_replay(EndlessChunkHeaderHandler, ROWS[:1]) as (r, requests):
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("over the 80 KiB read buffer", r.stdout)
            self.assertEqual([q["terminal_status"] for q in requests], ["failed"])


class HugeBodyHandler(http.server.BaseHTTPRequestHandler):
    """A non-streaming answer whose body goes on and on (64 MiB of text, then its end)."""
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        flood(self.wfile, b'{"choices": [{"text": "', b"a", 64 << 20, b'"}]}')
        self.close_connection = True

    def log_message(self, *args):
        pass


class HugeBodyTest(unittest.TestCase):
    def test_a_non_streaming_body_over_its_limit_fails_the_request(self):
        with stub_replay(HugeBodyHandler, ROWS[:1], "--no-stream") as (r, requests):
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            self.assertIn("1 malformed streams", r.stdout)
            self.assertIn("a response body over %d bytes" % ((1 << 20) + 1024 * 4), r.stdout)
            self.assertEqual([q["terminal_status"] for q in requests], ["failed"])


class EndlessModelsHandler(http.server.BaseHTTPRequestHandler):
    """GET /v1/models answered with a body that goes on and on (16 MiB, then the end)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        flood(self.wfile, b'{"data": [{"id": "', b"m", 16 << 20, b'"}]}')

    def log_message(self, *args):
        pass


class EndlessModelsTest(unittest.TestCase):
    def test_a_models_body_that_never_ends_is_refused_at_its_limit(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndlessModelsHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        files = TraceFiles(ROWS[:1])
        try:
            r = replay(files.trace, "--openai-url", "http://127.0.0.1:%d" % server.server_port)
            # (not the output in the message: it could hold the 16 MiB "model name")
            self.assertEqual(r.returncode, 1, r.stderr[-2000:])
            self.assertIn("/v1/models: a body over 1 MiB", r.stderr[-2000:])
        finally:
            server.shutdown()
            server.server_close()
            files.dir.cleanup()


class UsageErrorTest(unittest.TestCase):
    def test_flags_that_do_not_apply_are_usage_errors(self):
        files = TraceFiles(ROWS[:1])
        try:
            url = ["--openai-url", "http://127.0.0.1:1"]
            for flags, says in [(url + ["--router", "kv"], "--router"),
                                (url + ["--fleet", files.trace], "--fleet"),
                                (url + ["--connect", "tcp://127.0.0.1:1"], "--connect"),
                                (url + ["--num-workers", "2"], "--num-workers"),
                                (["--chat", "--connect", "tcp://127.0.0.1:1"], "--chat"),
                                (["--no-stream", "--connect", "tcp://127.0.0.1:1"],
                                 "--no-stream"),
                                (["--openai-connections", "2", "--connect",
                                  "tcp://127.0.0.1:1"], "--openai-connections"),
                                (url + ["--openai-connections", "1000000000"],
                                 "--openai-connections: must be in 0..256"),
                                (["--openai-url", "https://h:1"], "https")]:
                r = replay(files.trace, *flags)
                self.assertEqual(r.returncode, 2, (flags, r.stderr))
                self.assertIn(says, r.stderr)
        finally:
            files.dir.cleanup()


if __name__ == "__main__":
    unittest.main()
