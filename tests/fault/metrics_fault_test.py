#!/usr/bin/python3
"""Metrics faults where a consumer sees them (service/README.md "Failure drills"): a real
`mocker serve` child process, a real ZeroMQ SUB on its FPM endpoint and real HTTP scrapes of
its /metrics.

* `fpm_stop:after_passes=10`: the FPM subscriber gets the first 10 passes' metrics of a
  40-token request, then nothing — not the other 31 passes, and no idle heartbeat afterwards
  (every 0.1 s without the fault) — while the request streams to completion.
* `metrics_freeze:after_passes=10`: after a 40-token request completes, /metrics still serves
  the snapshot taken at the trigger (generation tokens below 40, the freeze itself counted in
  `mocker:faults_injected_total`) and the same bytes at every later scrape, while `stats`
  (not a snapshot) shows the 40 tokens and /health stays 200.

Waits are polls with deadlines; the only fixed windows are the checks that nothing arrives.
Needs MOCKER_BIN.
"""

import os
import re
import sys
import time
import unittest
import urllib.request

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import WAIT_S, Serve, paced, poll_until  # noqa: E402

TOKENS = 40
AFTER = 10
HEARTBEAT_S = 0.1


def http_get(url):
    with urllib.request.urlopen(url, timeout=WAIT_S) as r:
        return r.status, r.read().decode()


def counter(text, name, kind=None):
    """The value of a series of `name` (with kind="..." when given), summed over its labels."""
    total = 0.0
    found = False
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if kind is not None and 'kind="%s"' % kind not in line:
            continue
        total += float(line.rsplit(" ", 1)[1])
        found = True
    if not found:
        raise AssertionError("no series %s%s in /metrics" % (name, "" if kind is None else
                                                             "{kind=%s}" % kind))
    return total


class MetricsFaultTest(unittest.TestCase):
    def stream(self, serve):
        with serve.client() as c:
            c.submit("m1", prompt=list(range(1, 17)), max_tokens=TOKENS)
            tokens = list(c.stream("m1", timeout=WAIT_S))
            self.assertEqual(c.terminal("m1")["finish"], "length")
            stats = c.stats()
        self.assertEqual(len(tokens), TOKENS)
        return stats

    def fpm_messages(self, fault):
        flags = [*paced(1, 2), "--fpm-heartbeat-interval", str(HEARTBEAT_S)]
        if fault:
            flags += ["--fault", "fpm_stop:after_passes=%d" % AFTER]
        serve = Serve(*flags)
        self.addCleanup(serve.close)
        ctx = zmq.Context()
        self.addCleanup(ctx.term)
        sub = ctx.socket(zmq.SUB)
        self.addCleanup(sub.close, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(serve.endpoints["fpm[0]"])
        # Subscribed once an idle heartbeat arrives; take what is queued, then work.
        self.assertTrue(sub.poll(int(WAIT_S * 1000)), "no FPM heartbeat")
        while sub.poll(0):
            sub.recv_multipart()
        stats = self.stream(serve)
        got = 0
        while sub.poll(0):
            sub.recv_multipart()
            got += 1
        # Afterwards: idle heartbeats every 0.1 s, unless FPM stopped.
        later = 0
        deadline = time.monotonic() + 10 * HEARTBEAT_S
        while time.monotonic() < deadline:
            if sub.poll(int(max(0.0, deadline - time.monotonic()) * 1000) + 1):
                sub.recv_multipart()
                later += 1
        return got, later, stats

    def test_fpm_stop(self):
        got, later, stats = self.fpm_messages(fault=True)
        print("[fault] fpm_stop: %d FPM messages during the request, %d after" % (got, later))
        # The first AFTER passes' metrics (a heartbeat may slip in before the first pass).
        self.assertGreaterEqual(got, AFTER)
        self.assertLessEqual(got, AFTER + 1)
        self.assertEqual(later, 0)
        self.assertEqual(stats["faults"]["fpm_stop"], 1)

    def test_fpm_without_the_fault(self):
        got, later, stats = self.fpm_messages(fault=False)
        self.assertGreaterEqual(got, TOKENS)  # one per pass: prefill and every decode
        self.assertGreaterEqual(later, 1)
        self.assertIsNone(stats.get("faults"))

    def test_metrics_freeze(self):
        serve = Serve(*paced(1, 2), "--fault", "metrics_freeze:after_passes=%d" % AFTER)
        self.addCleanup(serve.close)
        url = serve.endpoints["http"]
        stats = self.stream(serve)
        self.assertEqual(stats["faults"]["metrics_freeze"], 1)
        status, first = http_get(url + "/metrics")
        self.assertEqual(status, 200)
        frozen_tokens = counter(first, "vllm:generation_tokens_total")
        self.assertLess(frozen_tokens, TOKENS)
        self.assertGreaterEqual(frozen_tokens, AFTER - 1)  # the prefill pass makes no decode token
        self.assertEqual(counter(first, "mocker:faults_injected_total", "metrics_freeze"), 1)
        # More work: /metrics does not move (same bytes), the engine does.
        self.stream(serve)
        # Past the publish interval (100 ms) a live board would have the new counters.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            status, again = http_get(url + "/metrics")
            self.assertEqual(again, first)
        self.assertEqual(http_get(url + "/health")[0], 200)
        print("[fault] metrics_freeze: /metrics frozen at %d generation tokens of %d"
              % (frozen_tokens, 2 * TOKENS))

    def test_metrics_move_without_the_fault(self):
        serve = Serve(*paced(1, 2))
        self.addCleanup(serve.close)
        url = serve.endpoints["http"]
        self.stream(serve)
        # The board publishes every 100 ms: until its first snapshot after the stream the
        # series may not be there at all (absent, not yet a failure).
        def generation_tokens():
            try:
                return counter(http_get(url + "/metrics")[1], "vllm:generation_tokens_total")
            except AssertionError:
                return None
        poll_until(lambda: generation_tokens() == TOKENS, "/metrics counting the 40 tokens",
                   WAIT_S)


if __name__ == "__main__":
    unittest.main()
