#!/usr/bin/python3
"""KV-event faults against `mocker index`, with real processes (tests/fault/README.md,
scenario 5; service/README.md "Failure drills").

A `mocker serve` child with one KV-event fault (`--fault`) is indexed by a `mocker index` child;
a client runs requests one after another, each with its own 256-token prompt (4 blocks of 64,
one KV-event batch: its prefill's BlockStored; 4 passes). The fault hits the batch of the first
pass after 40 passes, by when the index has applied a live batch (its subscriber is connected
and sees the fault as a live consumer does). What the index then shows is the fault's effect:

* `drop` — a gap the replay ROUTER heals (`gaps_healed`); verify clean;
* `drop_unhealable` — the replay cannot fill it: reported (`gaps_unhealed`), resynced from
  `kv_snapshot` (`resyncs`); verify clean;
* `suppress` — no gap at all, and only `verify` finds the blocks the index is missing;
* `duplicate`, `reorder`, `delay`, `truncate_ring` — absorbed: verify clean.

And the same seed and workload give the same fault log (seeded rates, two runs; `time_ms` is
wall-clock engine time live, so the lines are compared without it).

Waits are polls with deadlines. Needs MOCKER_BIN; python3-zmq and python3-msgpack.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import WAIT_S, Serve, poll_until  # noqa: E402
from index_harness import WORKER_ID, Index, clean_verify  # noqa: E402

PROMPT_TOKENS = 256  # 4 blocks of 64 (mocker serve's default block size)
BLOCKS_PER_PROMPT = 4
TRIGGER = 40  # the drills' faults hit the batch of the first pass after 40 (10 requests)


def prompt(n):
    """A distinct prompt per n (no shared prefix blocks between prompts)."""
    return [n * 1000 + i + 1 for i in range(PROMPT_TOKENS)]


def report(*lines):
    for line in lines:
        print("[kv-fault] " + line, flush=True)


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class KvEventFaultTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="mocker_kv_fault_")
        self.closers = []

    def tearDown(self):
        for close in reversed(self.closers):
            close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, *faults, seed=0, index=True):
        """A worker with `faults` (and a fault log), its index (unless not `index`), a client."""
        self.log = os.path.join(self.workdir, "faults-%d.jsonl" % len(self.closers))
        flags = ["--speedup-ratio", "0", "--fault-seed", str(seed), "--fault-log", self.log]
        for f in faults:
            flags += ["--fault", f]
        self.serve = Serve(*flags)
        self.closers.append(self.serve.close)
        if index:
            self.index = Index(self.serve, self.workdir)
            self.closers.append(self.index.close)
        self.client = self.serve.client()
        self.closers.append(self.client.close)

    def run_request(self, n):
        self.client.submit("r%d" % n, prompt(n), max_tokens=4)
        list(self.client.stream("r%d" % n, timeout=WAIT_S))

    def workload(self, requests):
        """Requests 0 .. requests-1, one after another."""
        for n in range(requests):
            self.run_request(n)

    def drill(self, *kinds, then=2):
        """Requests one after another: first until the index has applied a live batch (its SUB
        is connected: ZeroMQ's slow-joiner window), which must happen before the faults'
        trigger (TRIGGER passes, 4 per request); then on until every fault of `kinds` is in the
        fault log; then `then` more (a later batch reveals a gap, releases a reordered one)."""
        n = 0
        while self.index.stats()["live_messages"] == 0:
            self.assertLess(4 * n, TRIGGER, "no live batch reached the index before the trigger")
            self.run_request(n)
            n += 1
            try:
                poll_until(lambda: self.index.stats()["live_messages"] >= 1, "a live batch",
                           timeout=0.5, interval=0.02)
            except AssertionError:
                pass  # not connected yet: another request
        self.assertLess(4 * n, TRIGGER, "the faults fired before the index saw a live batch")
        while not all(self.fault_lines(kind) for kind in kinds):
            self.assertLess(n, 40, "faults %s not all injected: %s" % (kinds, read_log(self.log)))
            self.run_request(n)
            n += 1
        for _ in range(then):
            self.run_request(n)
            n += 1
        return n

    def fault_lines(self, kind):
        return [e for e in read_log(self.log) if e["kind"] == kind]

    def test_dropped_batch_is_healed_by_a_replay(self):
        self.start("drop:after_passes=%d" % TRIGGER)
        self.drill("drop")
        stats = poll_until(lambda: (lambda s: s if s["gaps_healed"] >= 1 else None)(
            self.index.stats()), "the gap healed", interval=0.02)
        clean_verify(self.index)
        dropped = self.fault_lines("drop")
        self.assertEqual(len(dropped), 1, read_log(self.log))
        self.assertEqual(stats["gaps_unhealed"], 0)
        self.assertEqual(stats["resyncs"], 0)
        report("drop: seq %d dropped; index gaps %d detected / %d healed / %d unhealed"
               % (dropped[0]["seq"], stats["gaps_detected"], stats["gaps_healed"],
                  stats["gaps_unhealed"]))

    def test_unhealable_drop_is_reported_and_resynced(self):
        self.start("drop_unhealable:after_passes=%d" % TRIGGER)
        self.drill("drop_unhealable")
        stats = poll_until(lambda: (lambda s: s if s["resyncs"] >= 1 else None)(
            self.index.stats()), "a resync", interval=0.02)
        clean_verify(self.index)
        dropped = self.fault_lines("drop_unhealable")
        self.assertEqual(len(dropped), 1, read_log(self.log))
        self.assertGreaterEqual(stats["gaps_unhealed"], 1)
        seq = dropped[0]["seq"]
        self.assertIn("batches %d..%d were lost and cannot be replayed" % (seq, seq),
                      self.index.stderr_text())
        self.assertEqual(stats["restarts"], 0)
        report("drop_unhealable: seq %d lost; index gaps %d detected / %d healed / %d unhealed, "
               "%d resyncs, %d replay requests"
               % (dropped[0]["seq"], stats["gaps_detected"], stats["gaps_healed"],
                  stats["gaps_unhealed"], stats["resyncs"], stats["replay_requests"]))

    def test_suppressed_events_are_a_silent_desync_only_verify_finds(self):
        self.start("suppress:after_passes=%d" % TRIGGER)
        self.drill("suppress")
        self.assertEqual(len(self.fault_lines("suppress")), 1, read_log(self.log))
        reply = self.index.query({"type": "verify", "id": "v"})
        stats = self.index.stats()
        self.assertEqual(stats["gaps_detected"], 0)
        self.assertEqual(stats["resyncs"], 0)
        self.assertFalse(reply["ok"], reply)
        source = reply["sources"][0]
        self.assertEqual(source["worker_id"], WORKER_ID)
        self.assertEqual(len(source["missing"]), BLOCKS_PER_PROMPT, source)
        self.assertEqual(source["extra"], [])
        self.assertEqual(source["worker_blocks"] - source["index_blocks"], BLOCKS_PER_PROMPT)
        report("suppress: no gap (gaps_detected 0); verify: index %d blocks, worker %d, "
               "%d missing" % (source["index_blocks"], source["worker_blocks"],
                               len(source["missing"])))

    def test_duplicate_reorder_delay_and_truncate_are_absorbed(self):
        # The ring is truncated before the reorder and the delay, not after: a gap they open is
        # healed from the ring (or by the late batch), so no truncation may race the index's
        # replay request for it. With the truncation last, a loaded machine let the index ask
        # for the delayed batch after the ring had forgotten it: an unhealed gap, a resync.
        self.start("duplicate:after_passes=%d" % TRIGGER,
                   "truncate_ring:after_passes=%d" % (TRIGGER + 8),
                   "reorder:after_passes=%d" % (TRIGGER + 16),
                   "delay:ms=150:after_passes=%d" % (TRIGGER + 24))
        self.drill("duplicate", "truncate_ring", "reorder", "delay")
        for kind in ("duplicate", "reorder", "delay", "truncate_ring"):
            self.assertEqual(len(self.fault_lines(kind)), 1, (kind, read_log(self.log)))
        poll_until(lambda: self.index.stats()["duplicate_batches"] >= 1, "a duplicate seen",
                   interval=0.02)
        reply = clean_verify(self.index)
        stats = self.index.stats()
        # Repeated and late batches of the same process are not taken for a restart.
        self.assertEqual(stats["restarts"], 0, self.index.stderr_text())
        self.assertEqual(stats["resyncs"], 0, self.index.stderr_text())
        if os.environ.get("KV_FAULT_SHOW_INDEX_LOG"):
            print(self.index.stderr_text())
        report("duplicate / reorder / delay / truncate_ring: verify clean (%d blocks); index "
               "%d duplicate batches, gaps %d detected / %d healed / %d unhealed, %d resyncs, "
               "%d restarts"
               % (reply["sources"][0]["index_blocks"], stats["duplicate_batches"],
                  stats["gaps_detected"], stats["gaps_healed"], stats["gaps_unhealed"],
                  stats["resyncs"], stats["restarts"]))

    def test_same_seed_same_fault_log(self):
        faults = ("drop:rate=0.3:after_passes=4", "duplicate:rate=0.3:after_passes=4",
                  "suppress:rate=0.2:after_passes=4")
        logs = []
        for _ in range(2):
            self.start(*faults, seed=42, index=False)
            self.workload(12)
            with open(self.log, encoding="utf-8") as f:
                # time_ms is engine time, i.e. wall time live: everything else must match.
                logs.append([re.sub(r'"time_ms":[0-9.]+,', "", line) for line in f])
            for close in reversed(self.closers):
                close()
            self.closers = []
        self.assertEqual(logs[0], logs[1])
        self.assertGreaterEqual(len(logs[0]), 3, logs[0])
        report("seeded rates over 12 batches: %d faults, the same in both runs" % len(logs[0]))


if __name__ == "__main__":
    unittest.main()
