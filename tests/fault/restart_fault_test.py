#!/usr/bin/python3
"""The worker `restart` fault (service/README.md "Failure drills") where its consumers see it,
with real processes: `mocker serve` children, a raw KV-event subscriber (a ZeroMQ SUB), a
`mocker index` child, real clients.

* `restart` armed through the admin interface while a stream runs (cleared=true, the default):
  the stream ends with finish `shutdown` and the restart's reason; the subscriber sees the
  sequence go back to 0 with AllBlocksCleared as the new batch 0, and a view built from the raw
  events alone (no sequence tracking) equals the worker's kv_snapshot afterwards; the index's
  view of the old prompts is emptied, then rebuilt by new work (verify clean); a prompt cached
  before the restart gets no prefix hit after it (cached_tokens 0, where it had 256 before);
  counted in the fault log, stats and /metrics.
* `restart:after_passes=42:cleared=false` from the command line, requests one after another
  (speedup 0: four passes each): the request in flight ends `shutdown` after its 2 tokens; the
  new sequence starts at 0 with the next request's BlockStored and no AllBlocksCleared, so the
  raw-event view keeps the old process's blocks (stale: not in kv_snapshot), while `mocker
  index` finds the restart by its sequence handling (`restarts`) and is clean again.
* `restart:down_ms=800` armed at run time: a request sent once the restart has ended the
  running stream is acknowledged no sooner than 800 ms after the arming, and streams in full.
* A fleet of two: `restart:worker=1` ends worker 1's stream only; worker 0's goes on streaming.

Waits are polls with deadlines. Needs MOCKER_BIN; python3-zmq and python3-msgpack.
"""

import http.client
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest
import urllib.parse

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import LONG, WAIT_S, Serve, paced, poll_until  # noqa: E402
from index_harness import WORKER_ID, Index, clean_verify  # noqa: E402
from mocker_client import MockerClient  # noqa: E402

PROMPT_TOKENS = 256  # 4 blocks of 64 (mocker serve's default block size)
RESTART_REASON = "the worker restarted (fault injected: restart)"


def prompt(n):
    """A distinct prompt per n (no shared prefix blocks between prompts)."""
    return [n * 1000 + i + 1 for i in range(PROMPT_TOKENS)]


def report(*lines):
    for line in lines:
        print("[restart] " + line, flush=True)


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def http_request(url, method, path, body=None):
    """(status, body text) of one HTTP request on a fresh connection."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=WAIT_S)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def arm(url, spec):
    status, body = http_request(url, "POST", "/admin/faults", body=spec)
    assert status == 201, (status, body)
    return json.loads(body)


def metric(url, name, kind):
    status, text = http_request(url, "GET", "/metrics")
    assert status == 200, status
    m = re.search(r'^%s\{[^}]*kind="%s"\} (\S+)$' % (re.escape(name), kind), text, re.M)
    assert m, "no %s{kind=%s} in /metrics" % (name, kind)
    return float(m.group(1))


def apply_events(view, events):
    """Stored adds, Removed removes, AllBlocksCleared empties."""
    for e in events:
        if e[0] == "BlockStored":
            view.update(e[1])
        elif e[0] == "BlockRemoved":
            view.difference_update(e[1])
        elif e[0] == "AllBlocksCleared":
            view.clear()


class Subscriber:
    """A raw KV-event subscriber: every live batch as (seq, [event, ...]) in arrival order, and
    a view built from the events alone (Stored adds, Removed removes, AllBlocksCleared empties),
    as a consumer that does not track sequence numbers keeps it."""

    def __init__(self, endpoint):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.batches = []
        self.view = set()

    def pump(self):
        """Takes what has arrived; returns the number of batches so far."""
        while self.sock.poll(0):
            topic, seq, payload = self.sock.recv_multipart()
            batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            events = batch[1]  # [ts, [event, ...], dp_rank]
            self.batches.append((int.from_bytes(seq, "big"), events))
            apply_events(self.view, events)
        return len(self.batches)

    def view_before(self, i):
        """The raw-event view of batches [0, i) alone (the old process's, when i is the
        restart point)."""
        view = set()
        for _, events in self.batches[:i]:
            apply_events(view, events)
        return view

    def restart_point(self):
        """The index of the first batch whose seq is not after the previous one, or None."""
        for i in range(1, len(self.batches)):
            if self.batches[i][0] <= self.batches[i - 1][0]:
                return i
        return None

    def close(self):
        self.sock.close()
        self.context.term()


def run_request(client, id, tokens, max_tokens, timeout=WAIT_S):
    """Submits one request on a client with nothing else in flight and reads its whole stream:
    {"tokens": n, "cached": cached_tokens of its first token, "finish", "reason", "index"}."""
    client.submit(id, tokens, max_tokens=max_tokens)
    return read_stream(client, id, timeout)


def read_stream(client, id, timeout=WAIT_S, until_tokens=None):
    """Reads request `id`'s entries until its terminal (or until `until_tokens` tokens)."""
    out = {"tokens": 0, "cached": None, "finish": None, "reason": None, "index": None}
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("request %s: no terminal within %s s (%r)" % (id, timeout, out))
        m = client.recv(left)
        if m is None or m["type"] != "output":
            assert m is None or m["type"] == "submit_ack", m
            continue
        for e in m["outputs"]:
            if e["id"] != id:
                continue
            if e["tokens"] and out["cached"] is None:
                out["cached"] = e.get("cached_tokens")
            out["tokens"] += len(e["tokens"])
            if e["finish"] is not None:
                out.update(finish=e["finish"], reason=e.get("reason"), index=e["index"])
                return out
        if until_tokens is not None and out["tokens"] >= until_tokens:
            return out


class RestartFaultTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="mocker_restart_fault_")
        self.log = os.path.join(self.workdir, "faults.jsonl")

    def tearDown(self):
        shutil.rmtree(self.workdir, ignore_errors=True)

    def closing(self, thing):
        self.addCleanup(thing.close)
        return thing

    def warm_up(self, client, sub, first=0, limit=10):
        """Requests prompt(first), prompt(first + 1), ... one after another until the
        subscriber has a live batch (ZeroMQ's slow joiner); returns how many ran."""
        n = first
        while not sub.pump():
            self.assertLess(n - first, limit, "no live batch reached the subscriber")
            self.assertEqual(run_request(client, "warm%d" % n, prompt(n), 4)["finish"], "length")
            n += 1
            try:
                poll_until(sub.pump, "a live batch", timeout=0.5, interval=0.02)
            except AssertionError:
                pass  # not connected yet: another request
        return n - first

    def test_cleared_restart_armed_at_run_time(self):
        serve = Serve(*paced(1, 1), "--faults-admin", "--fault-log", self.log)
        self.addCleanup(serve.close)
        url = serve.endpoints["http"]
        sub = self.closing(Subscriber(serve.endpoints["kv_events[0]"]))
        index = self.closing(Index(serve, self.workdir))
        client = self.closing(serve.client())
        self.warm_up(client, sub)
        # Control: prompt 0 is cached now (a full prefix hit but the last block, vLLM's rule).
        before = run_request(client, "before", prompt(0), 4)
        self.assertEqual(before["cached"], PROMPT_TOKENS - 64, before)
        poll_until(lambda: index.overlap(prompt(0)) == (4, 4), "the index holding prompt 0")
        # A stream in flight when the restart comes.
        streaming = self.closing(serve.client())
        streaming.submit("long", prompt(50), max_tokens=LONG)
        first = read_stream(streaming, "long", until_tokens=3)["tokens"]
        self.assertGreaterEqual(first, 3)
        armed = arm(url, "restart")
        self.assertEqual(armed["spec"], "restart:cleared=true:down_ms=0")

        ended = read_stream(streaming, "long")
        self.assertEqual((ended["finish"], ended["reason"]), ("shutdown", RESTART_REASON))
        # The terminal continues the stream's positions: its index is the tokens sent.
        self.assertEqual(ended["index"], first + ended["tokens"])
        # The index drops the old process's blocks (AllBlocksCleared, and the sequence).
        poll_until(lambda: index.overlap(prompt(0)) == (4, 0), "the index emptied")
        poll_until(lambda: index.overlap(prompt(50)) == (4, 0), "the long prompt dropped")
        # A prompt cached before the restart: no prefix hit.
        after = run_request(client, "after", prompt(0), 4)
        self.assertEqual((after["finish"], after["cached"]), ("length", 0), after)
        poll_until(lambda: sub.pump() and sub.restart_point() is not None
                   and len(sub.batches) > sub.restart_point() + 1, "the new sequence")
        i = sub.restart_point()
        self.assertEqual(sub.batches[i], (0, [["AllBlocksCleared"]]))
        self.assertEqual(sub.batches[i + 1][0], 1)
        self.assertEqual(sub.batches[i + 1][1][0][0], "BlockStored")
        snapshot = set(client.kv_snapshot()[0])
        self.assertEqual(len(snapshot), 4)
        self.assertEqual(sub.view, snapshot)  # the raw-event view followed the clear
        # Rebuilt: the index has prompt 0 again and equals the worker.
        poll_until(lambda: index.overlap(prompt(0)) == (4, 4), "the index rebuilt")
        reply = clean_verify(index)
        stats = index.stats()
        self.assertGreaterEqual(stats["restarts"], 1, index.stderr_text())
        # Accounting.
        lines = [e for e in read_log(self.log) if e["kind"] == "restart"]
        self.assertEqual(len(lines), 1, read_log(self.log))
        self.assertRegex(lines[0]["detail"],
                         r"^at start, AllBlocksCleared first, down 0\.000 ms, armed at pass \d+$")
        self.assertEqual(client.stats()["faults"]["restart"], 1)
        poll_until(lambda: metric(url, "mocker:faults_injected_total", "restart") == 1,
                   "/metrics counting the restart")
        report("cleared=true: stream ended shutdown after %d tokens; subscriber: seq %d then "
               "0 (AllBlocksCleared), 1; prompt 0 cached %d tokens before, %d after; index "
               "restarts %d, verify clean (%d blocks)"
               % (ended["index"], sub.batches[i - 1][0], before["cached"], after["cached"],
                  stats["restarts"], reply["sources"][0]["index_blocks"]))

    def test_uncleared_restart_from_the_command_line(self):
        # Speedup 0: a 256-token prompt with max_tokens 4 is 4 passes; the restart comes before
        # pass 43, request 10's third: it has streamed 2 tokens.
        serve = Serve("--speedup-ratio", "0", "--fault-log", self.log,
                      "--fault", "restart:after_passes=42:cleared=false")
        self.addCleanup(serve.close)
        sub = self.closing(Subscriber(serve.endpoints["kv_events[0]"]))
        index = self.closing(Index(serve, self.workdir))
        client = self.closing(serve.client())
        n = self.warm_up(client, sub)
        self.assertLess(n, 10, "the subscriber joined too late")
        while n < 10:
            self.assertEqual(run_request(client, "r%d" % n, prompt(n), 4)["finish"], "length")
            n += 1
        cut = run_request(client, "r10", prompt(10), 4)
        self.assertEqual((cut["finish"], cut["reason"], cut["tokens"], cut["index"]),
                         ("shutdown", RESTART_REASON, 2, 2))
        sub.pump()
        self.assertIsNone(sub.restart_point())  # nothing published since
        after = run_request(client, "r11", prompt(11), 4)
        self.assertEqual((after["finish"], after["cached"]), ("length", 0))
        poll_until(lambda: sub.pump() and sub.restart_point() is not None, "the new sequence")
        i = sub.restart_point()
        self.assertEqual(sub.batches[i][0], 0)
        self.assertEqual([e[0] for e in sub.batches[i][1]], ["BlockStored"])
        self.assertFalse(any(e[0] == "AllBlocksCleared" for _, events in sub.batches
                             for e in events))
        # A consumer of the raw events keeps the old process's blocks: stale.
        snapshot = set(client.kv_snapshot()[0])
        stale = sub.view - snapshot
        self.assertEqual(len(snapshot), 4)
        self.assertTrue(snapshot <= sub.view)
        self.assertGreaterEqual(len(stale), 4)
        # Stale blocks are the old process's. Its view is taken from the batches before the
        # restart point once all have arrived: a PUB's last batches may reach the subscriber
        # after the client has read the stream that produced them.
        self.assertTrue(stale <= sub.view_before(i), (stale, sub.view_before(i)))
        # mocker index tracks the sequence: it finds the restart and drops them itself.
        reply = clean_verify(index)
        stats = index.stats()
        self.assertGreaterEqual(stats["restarts"], 1, index.stderr_text())
        self.assertIn("restarted", index.stderr_text())
        self.assertEqual(index.overlap(prompt(3)), (4, 0))
        lines = read_log(self.log)
        self.assertEqual([e["kind"] for e in lines], ["restart"])
        self.assertEqual(lines[0]["detail"], "after 42 passes, no AllBlocksCleared, down 0.000 ms")
        report("cleared=false: request 10 ended shutdown after 2 tokens; subscriber: seq %d "
               "then 0 (BlockStored), no AllBlocksCleared; its raw view keeps %d stale blocks; "
               "index restarts %d, gaps %d detected, resyncs %d, verify clean (%d blocks)"
               % (sub.batches[i - 1][0], len(stale), stats["restarts"], stats["gaps_detected"],
                  stats["resyncs"], reply["sources"][0]["index_blocks"]))

    def test_down_ms_delays_the_comeback(self):
        down_ms = 800
        serve = Serve(*paced(1, 1), "--faults-admin", "--fault-log", self.log)
        self.addCleanup(serve.close)
        streaming = self.closing(serve.client())
        streaming.submit("long", prompt(1), max_tokens=LONG)
        read_stream(streaming, "long", until_tokens=3)
        client = self.closing(serve.client())
        t_arm = time.monotonic()
        arm(serve.endpoints["http"], "restart:down_ms=%d" % down_ms)
        # The stream's terminal says the restart has happened: a request sent now arrives
        # while the worker is down (sent earlier, it could be read before the restart fired).
        self.assertEqual(read_stream(streaming, "long")["finish"], "shutdown")
        client.submit("during", prompt(2), max_tokens=4)
        client.wait_ack("during", timeout=WAIT_S)
        acked_after_ms = (time.monotonic() - t_arm) * 1000.0
        self.assertGreaterEqual(acked_after_ms, down_ms)
        self.assertEqual(read_stream(client, "during")["finish"], "length")
        lines = read_log(self.log)
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("down 800.000 ms", lines[0]["detail"])
        report("down_ms=%d: a request sent after the arming was acknowledged %.0f ms after it"
               % (down_ms, acked_after_ms))

    def test_fleet_restarts_the_scoped_worker_only(self):
        serve = Serve(*paced(1, 1), "--num-workers", "2", "--faults-admin",
                      "--fault-log", self.log)
        self.addCleanup(serve.close)
        ep = serve.endpoints
        w0 = self.closing(MockerClient.connect(ep["worker[0].submit"], ep["worker[0].cancel"]))
        w1 = self.closing(MockerClient.connect(ep["worker[1].submit"], ep["worker[1].cancel"]))
        w0.submit("zero", prompt(1), max_tokens=LONG)
        w1.submit("one", prompt(2), max_tokens=LONG)
        read_stream(w0, "zero", until_tokens=3)
        read_stream(w1, "one", until_tokens=3)
        armed = arm(ep["http"], "restart:worker=1")
        self.assertEqual([w["worker"] for w in armed["workers"]], [1])
        ended = read_stream(w1, "one")
        self.assertEqual((ended["finish"], ended["reason"]), ("shutdown", RESTART_REASON))
        self.assertGreaterEqual(ended["index"], 3)
        # Worker 0 streams on, well past the restart.
        more = read_stream(w0, "zero", until_tokens=50)
        self.assertIsNone(more["finish"])
        self.assertEqual([(e["kind"], e["worker"]) for e in read_log(self.log)],
                         [("restart", 1)])
        self.assertEqual(w1.stats()["faults"]["restart"], 1)
        self.assertIsNone(w0.stats().get("faults"))  # worker 0 has no fault armed at all
        # Worker 1 serves again, from an empty cache.
        again = run_request(w1, "again", prompt(2), 4)
        self.assertEqual((again["finish"], again["cached"]), ("length", 0))
        report("fleet: worker 1 restarted (its stream ended shutdown after %d tokens), worker 0 "
               "streamed %d more tokens" % (ended["index"], more["tokens"]))


if __name__ == "__main__":
    unittest.main()
