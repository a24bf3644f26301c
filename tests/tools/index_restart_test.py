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
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))

import msgpack  # noqa: E402
import zmq  # noqa: E402

from fault_harness import (ORPHAN_GUARD, STARTUP_TIMEOUT_S, WAIT_S, Serve,  # noqa: E402
                           mocker_bin, poll_until)

WORKER_ID = 7
PROMPT_TOKENS = 256  # 4 blocks of 64
BLOCK_SIZE = 64


def prompt(n):
    """A distinct prompt per n (no shared prefix blocks between prompts)."""
    return [n * 1000 + i + 1 for i in range(PROMPT_TOKENS)]


class Index:
    """A `mocker index` child process; query() talks to its query ROUTER."""

    def __init__(self, serve, workdir):
        ep = serve.endpoints
        spec = "%d=%s,replay=%s,snapshot=%s" % (WORKER_ID, ep["kv_events[0]"],
                                                 ep["kv_replay[0]"], serve.submit)
        self.stderr = open(os.path.join(workdir, "index.stderr"), "w+b")
        self.proc = subprocess.Popen(
            [*ORPHAN_GUARD, mocker_bin(), "index", "--worker", spec, "--query-endpoint",
             "tcp://127.0.0.1:*", "--stats-interval-s", "0", "--probe-interval-ms", "100",
             "--replay-timeout-ms", "500", "--linger-ms", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr)
        lines = []
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        buf = b""
        while b"ready" not in lines:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                self.close()
                raise AssertionError("mocker index printed no `ready`: " + self.stderr_text())
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.close()
                raise AssertionError("mocker index exited: " + self.stderr_text())
            buf += chunk
            lines = buf.split(b"\n")[:-1]
        query = [ln.decode().split(" ", 1)[1] for ln in lines if ln.startswith(b"query ")]
        assert query, lines
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(query[0])

    def query(self, request, timeout=WAIT_S):
        self.sock.send(msgpack.packb(request))
        if not self.sock.poll(int(timeout * 1000)):
            raise AssertionError("no reply to %r within %s s: %s"
                                 % (request, timeout, self.stderr_text()))
        reply = msgpack.unpackb(self.sock.recv(), raw=False)
        assert reply["type"] != "error", reply
        return reply

    def overlap(self, tokens):
        reply = self.query({"type": "overlap", "tokens": tokens})
        workers = {w["worker_id"]: w["blocks"] for w in reply["workers"]}
        return reply["num_blocks"], workers.get(WORKER_ID, 0)

    def stats(self):
        return self.query({"type": "stats"})["stats"]

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self):
        if getattr(self, "sock", None) is not None:
            self.sock.close()
            self.context.term()
            self.sock = None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


def replayed_batches(endpoint, start_seq=0):
    """Everything the replay ROUTER at `endpoint` holds from start_seq: [(seq, batch), ...]
    (r1 replies `["", seq, payload]`, end marker seq ff*8)."""
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart([b"", start_seq.to_bytes(8, "big")])
        batches = []
        while True:
            if not sock.poll(int(WAIT_S * 1000)):
                raise AssertionError("no replay end marker from %s" % endpoint)
            frames = sock.recv_multipart()
            if frames[1] == b"\xff" * 8:
                return batches
            batches.append((int.from_bytes(frames[1], "big"),
                            msgpack.unpackb(frames[2], raw=False, strict_map_key=False)))
    finally:
        sock.close()
        context.term()


def clean_verify(index):
    """Polls the verify query until the index equals the worker's kv_snapshot; returns the
    reply (fails with the last difference at the deadline)."""
    last = {}

    def check():
        reply = index.query({"type": "verify", "id": "v"})
        last["reply"] = reply
        return reply if reply["ok"] else None

    try:
        return poll_until(check, "a clean verify", timeout=WAIT_S, interval=0.05)
    except AssertionError as e:
        raise AssertionError("%s; last verify: %r; index log: %s"
                             % (e, last.get("reply"), index.stderr_text()))


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
