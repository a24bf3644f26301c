"""A `mocker index` child process for the process-level tests (tests/fault/README.md,
tests/tools/index_restart_test.py): `Index` (started against one worker rank, its query
ROUTER read back from stdout), `replayed_batches` (what a replay ROUTER holds) and
`clean_verify` (poll the verify query until the index equals the worker's kv_snapshot). Every
wait is a poll or a select with a deadline.
"""

import os
import select
import subprocess
import time

import msgpack
import zmq

from fault_harness import ORPHAN_GUARD, STARTUP_TIMEOUT_S, WAIT_S, mocker_bin, poll_until

WORKER_ID = 7


class Index:
    """A `mocker index` child process; query() talks to its query ROUTER."""

    def __init__(self, serve, workdir, *flags):
        ep = serve.endpoints
        spec = "%d=%s,replay=%s,snapshot=%s" % (WORKER_ID, ep["kv_events[0]"],
                                                 ep["kv_replay[0]"], serve.submit)
        self.stderr = open(os.path.join(workdir, "index.stderr"), "w+b")
        self.proc = subprocess.Popen(
            [*ORPHAN_GUARD, mocker_bin(), "index", "--worker", spec, "--query-endpoint",
             "tcp://127.0.0.1:*", "--stats-interval-s", "0", "--probe-interval-ms", "100",
             "--replay-timeout-ms", "500", "--linger-ms", "0", *flags],
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
