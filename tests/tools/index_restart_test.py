"""`mocker index` across a worker restart, with real processes (tools/index/README.md, "Worker
restarts").

A `mocker serve` child (ephemeral loopback ports) is indexed by a `mocker index` child; the
worker serves load and is SIGKILLed with requests in flight; a new `mocker serve` starts on the
same endpoints (its sequence numbers start at 0 again) and serves different work. The index
must then hold exactly the new worker's blocks: its `verify` query (index vs the worker's
kv_snapshot) is clean, its block count equals the new worker's kv_snapshot, the old prompts
overlap nothing and the new ones overlap fully. Run once with `clear_on_start` (batch 0 is
AllBlocksCleared) and once without.

The overlap queries give no block size, so they also pin `mocker index`'s default block size to
the worker's (64).

Needs MOCKER_BIN (the mocker binary); python3-zmq and python3-msgpack.
"""

import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))

from fault_harness import WAIT_S, Serve  # noqa: E402
from index_harness import Index, clean_verify, replayed_batches  # noqa: E402

PROMPT_TOKENS = 256  # 4 blocks of 64
BLOCK_SIZE = 64


def prompt(n):
    """A distinct prompt per n (no shared prefix blocks between prompts)."""
    return [n * 1000 + i + 1 for i in range(PROMPT_TOKENS)]


class IndexRestartTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="mocker_index_restart_")
        self.closers = []

    def tearDown(self):
        for close in reversed(self.closers):
            close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def run_restart(self, clear_on_start):
        serve_flags = ["--kv-events-clear-on-start"] if clear_on_start else []
        old = Serve(*serve_flags)
        self.closers.append(old.close)
        index = Index(old, self.workdir)
        self.closers.append(index.close)

        # Load on the first worker: 12 requests streaming; the first 6 run to the end.
        client = old.client()
        self.closers.append(client.close)
        for n in range(12):
            client.submit("old%d" % n, prompt(n), max_tokens=4 if n < 6 else 100000)
        for n in range(6):
            list(client.stream("old%d" % n, timeout=WAIT_S))
        reply = clean_verify(index)
        old_blocks = reply["sources"][0]["worker_blocks"]
        self.assertGreaterEqual(old_blocks, 6 * PROMPT_TOKENS // BLOCK_SIZE)
        self.assertEqual(index.overlap(prompt(0)), (4, 4))

        # SIGKILL with six requests in flight; a new process on the same endpoints.
        old.kill()
        new = Serve(*serve_flags, endpoints=old.endpoint_by_flag())
        self.closers.append(new.close)
        if clear_on_start:
            # Batch 0 of the new process, before any work: AllBlocksCleared (vLLM layout p8:
            # [ts, [event, ...], dp_rank], the event ["AllBlocksCleared"]).
            seq, batch = replayed_batches(new.endpoints["kv_replay[0]"])[0]
            self.assertEqual(seq, 0)
            self.assertEqual(batch[1], [["AllBlocksCleared"]])
        client2 = new.client()
        self.closers.append(client2.close)
        for n in range(100, 103):
            client2.submit("new%d" % n, prompt(n), max_tokens=4)
        for n in range(100, 103):
            list(client2.stream("new%d" % n, timeout=WAIT_S))

        reply = clean_verify(index)
        source = reply["sources"][0]
        snapshot = client2.kv_snapshot()[0]
        self.assertEqual(source["index_blocks"], len(snapshot))
        self.assertEqual(source["worker_blocks"], len(snapshot))
        self.assertLess(len(snapshot), old_blocks)
        for n in range(12):
            self.assertEqual(index.overlap(prompt(n)), (4, 0), "old prompt %d" % n)
        for n in range(100, 103):
            self.assertEqual(index.overlap(prompt(n)), (4, 4), "new prompt %d" % n)
        stats = index.stats()
        self.assertGreaterEqual(stats["restarts"], 1, index.stderr_text())
        print("restart: old worker %d blocks, new worker %d blocks, index %d; restarts %d, "
              "gaps %d detected / %d healed, resyncs %d"
              % (old_blocks, len(snapshot), source["index_blocks"], stats["restarts"],
                 stats["gaps_detected"], stats["gaps_healed"], stats["resyncs"]))

    def test_restart_without_clear_on_start(self):
        self.run_restart(clear_on_start=False)

    def test_restart_with_clear_on_start(self):
        self.run_restart(clear_on_start=True)


if __name__ == "__main__":
    unittest.main()
