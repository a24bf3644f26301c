#!/usr/bin/python3
"""End-to-end tests of the mocker_client package (and `mocker submit`) against a real `mocker serve`.

Usage: test_mocker_client.py [path/to/mocker] [unittest args]   (or MOCKER_BIN=path/to/mocker)

Every server binds ephemeral loopback ports (`tcp://127.0.0.1:*`) and the endpoints are parsed
from its stdout. Nothing sleeps to wait for an event: every wait polls with a deadline. Needs
only Debian's python3-zmq, python3-msgpack and python3-xxhash.
"""

import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import msgpack
import xxhash
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mocker_client import (DisaggregatedClient, HandedOff, MockerClient,  # noqa: E402
                           ProtocolError, ServerError, SubmitRejected, decode_message,
                           encode_message, load_fleet, read_key_file)

MOCKER_BIN = None
STARTUP_TIMEOUT_S = 10.0
WAIT_S = 10.0  # bound of any single wait; the whole file runs in a few seconds
EPHEMERAL = "tcp://127.0.0.1:*"
ENDPOINT_FLAGS = ["--submit-endpoint", EPHEMERAL, "--cancel-endpoint", EPHEMERAL,
                  "--kv-events-endpoint", EPHEMERAL, "--kv-replay-endpoint", EPHEMERAL,
                  "--fpm-endpoint", EPHEMERAL, "--http-endpoint", "127.0.0.1:0"]
# Real pacing with a fixed 2 ms pass: long requests stay active for as long as a test needs.
PACED_FLAGS = ["--speedup-ratio", "1", "--timing-model", "fixed", "--fixed-prefill-ms", "2",
               "--fixed-decode-ms", "2"]
LONG = 10_000_000  # max_tokens of a request that only ends by cancel or shutdown


class Serve:
    """A `mocker serve` child process on ephemeral ports."""

    def __init__(self, *flags):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([MOCKER_BIN, "serve", *ENDPOINT_FLAGS, *flags],
                                     stdout=subprocess.PIPE, stderr=self.stderr)
        self.endpoints = {}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RuntimeError("mocker serve printed no `ready` within %s s" % STARTUP_TIMEOUT_S)
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.kill()
                raise RuntimeError("mocker serve exited before `ready`: %s" % self.stderr_text())
            buf += chunk
            lines = buf.split(b"\n")
            if b"ready" in lines[:-1]:
                break
        for line in lines[:lines.index(b"ready")]:
            name, endpoint = line.decode().split(" ", 1)
            self.endpoints[name] = endpoint
        self.submit = self.endpoints.get("submit")  # N > 1: worker[I].submit, ...
        self.cancel = self.endpoints.get("cancel")

    def client(self, routing_id=None):
        return MockerClient.connect(self.submit, self.cancel, routing_id=routing_id)

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def terminate(self, timeout=WAIT_S):
        """SIGTERM; returns the exit code (kills and fails on timeout)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("mocker serve did not exit within %s s of SIGTERM" % timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        if self.proc.poll() is None:
            code = self.terminate()
            assert code == 0, "mocker serve exited with %s: %s" % (code, self.stderr_text())
        self.proc.stdout.close()
        self.stderr.close()


SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def poll_until(predicate, what, timeout=WAIT_S, interval=0.005):
    """Calls predicate() until it returns a true value (returned); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)  # a poll interval, not a wait for an event


def recv_type(client, type_, timeout=WAIT_S):
    m = client.recv(timeout)
    if m is None:
        raise AssertionError("no %s within %s s" % (type_, timeout))
    if m["type"] != type_:
        raise AssertionError("expected %s, got %r" % (type_, m))
    return m


# ------------------------------------------------------------------------------------------------
# Block hashing (docs/engine.md, Block hashing), recomputed independently

HASH_SEED = 1337
CHAIN_SEED = 1337


def content_hash(tokens):
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens), seed=HASH_SEED)


def chain_hash(parent, content):
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, content), seed=CHAIN_SEED)


def sequence_hashes(tokens, block_size, parent=None):
    out = []
    for i in range(len(tokens) // block_size):
        c = content_hash(tokens[i * block_size:(i + 1) * block_size])
        prev = out[-1] if out else parent
        out.append(c if prev is None else chain_hash(prev, c))
    return out


class KvIndex:
    """A KV-event subscriber's view: applies vLLM-format batches (p8 layout) in seq order."""

    def __init__(self, block_size):
        self.block_size = block_size
        self.hashes = set()
        self.next_seq = None
        self.stored = 0
        self.removed = 0

    def apply(self, seq, payload, test):
        if self.next_seq is not None:
            test.assertEqual(seq, self.next_seq, "KV-event sequence gap")
        self.next_seq = seq + 1
        batch = msgpack.unpackb(payload, raw=False)
        test.assertIsInstance(batch, list)
        test.assertEqual(len(batch), 3)  # [ts, events, dp_rank]
        test.assertIsInstance(batch[0], float)
        test.assertEqual(batch[2], 0)
        for ev in batch[1]:
            tag = ev[0]
            if tag == "BlockStored":
                test.assertEqual(len(ev), 8)  # p8
                hashes, parent, token_ids, block_size = ev[1], ev[2], ev[3], ev[4]
                test.assertEqual(block_size, self.block_size)
                test.assertEqual(len(token_ids), len(hashes) * block_size)
                # The event's hashes are exactly the chain of its token ids from its parent.
                test.assertEqual(sequence_hashes(token_ids, block_size, parent), hashes)
                for h in hashes:
                    test.assertNotIn(h, self.hashes, "Stored twice without a Removed")
                    self.hashes.add(h)
                self.stored += len(hashes)
            elif tag == "BlockRemoved":
                test.assertEqual(len(ev), 3)
                for h in ev[1]:
                    test.assertIn(h, self.hashes, "Removed a hash never Stored")
                    self.hashes.discard(h)
                self.removed += len(ev[1])
            elif tag == "AllBlocksCleared":
                self.hashes.clear()
            else:
                test.fail("unknown KV event %r" % (ev,))


def replay_from(ctx, endpoint, start_seq, timeout=WAIT_S):
    """Fetches the buffered KV-event batches with seq >= start_seq (replay layout r1)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    try:
        s.send_multipart([b"", struct.pack(">Q", start_seq)])
        out = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not s.poll(int(left * 1000)):
                raise AssertionError("replay: no end marker within %s s" % timeout)
            frames = s.recv_multipart()
            assert len(frames) == 3 and frames[0] == b"", frames
            if frames[1] == b"\xff" * 8:
                return out
            out.append((struct.unpack(">Q", frames[1])[0], frames[2]))
    finally:
        s.close(0)


# ------------------------------------------------------------------------------------------------


class StreamingTest(unittest.TestCase):
    """Unpaced service (speedup 0): streams, plans, interleaving, stats, malformed input."""

    @classmethod
    def setUpClass(cls):
        cls.serve = Serve("--speedup-ratio", "0", "--block-size", "4", "--num-gpu-blocks", "256")

    @classmethod
    def tearDownClass(cls):
        cls.serve.close()

    def setUp(self):
        self.client = self.serve.client()

    def tearDown(self):
        self.client.close()

    def test_stream_completes_in_order_with_length_finish(self):
        self.client.submit("s1", prompt=list(range(1, 10)), max_tokens=37)
        gen = self.client.stream("s1", timeout=WAIT_S)
        tokens = list(gen)
        self.assertEqual(len(tokens), 37)
        self.assertTrue(all(0 <= t < 2 ** 32 for t in tokens))
        terminal = self.client.terminal("s1")
        self.assertEqual(terminal["finish"], "length")
        self.assertEqual(self.client.acks["s1"], 0)
        self.assertIsNone(self.client.recv(0))  # nothing follows a terminal

    def test_entries_are_contiguous_and_first_carries_cached_tokens(self):
        self.client.submit("c1", prompt=[7] * 8, max_tokens=5)
        entries = []
        while not entries or entries[-1]["finish"] is None:
            m = self.client.recv(WAIT_S)
            self.assertIsNotNone(m)
            if m["type"] == "output":
                entries += [e for e in m["outputs"] if e["id"] == "c1"]
        index = 0
        for e in entries:
            if e["tokens"]:
                self.assertEqual(e["index"], index)
            index += len(e["tokens"])
        self.assertEqual(index, 5)
        self.assertIsNotNone(entries[0]["cached_tokens"])

    def test_planned_output_tokens_come_back_verbatim(self):
        plan = [0, 1, 2 ** 32 - 1, 424242, 7, 7, 7, 99999]
        self.client.submit("p1", prompt=[5, 6, 7], max_tokens=3, output_tokens=plan)
        self.assertEqual(list(self.client.stream("p1")), plan)  # the plan's length wins
        self.assertEqual(self.client.terminal("p1")["finish"], "length")

    def test_two_clients_interleave_without_mixing(self):
        with self.serve.client() as other:
            plan_a = list(range(1000, 1200))
            plan_b = list(range(5000, 5200))
            # The same request id on both clients: ids are scoped by routing id.
            self.client.submit("same", prompt=[1, 2, 3, 4, 5], max_tokens=1, output_tokens=plan_a)
            other.submit("same", prompt=[1, 2, 3, 4, 5], max_tokens=1, output_tokens=plan_b)
            got_a, got_b = [], []
            gen_a, gen_b = self.client.stream("same"), other.stream("same")
            # Alternate between the streams so both are in flight at once.
            while gen_a or gen_b:
                for gen, got, name in ((gen_a, got_a, "a"), (gen_b, got_b, "b")):
                    if gen is None:
                        continue
                    try:
                        got.append(next(gen))
                    except StopIteration:
                        if name == "a":
                            gen_a = None
                        else:
                            gen_b = None
            self.assertEqual(got_a, plan_a)
            self.assertEqual(got_b, plan_b)
            # Neither client received anything else.
            self.assertIsNone(self.client.recv(0))
            self.assertIsNone(other.recv(0))

    def test_multiplexed_streams_on_one_client(self):
        self.client.submit("m1", prompt=[1, 2, 3], max_tokens=1, output_tokens=[11] * 50)
        self.client.submit("m2", prompt=[4, 5, 6], max_tokens=1, output_tokens=[22] * 30)
        # Reading m2 first keeps m1's entries queued, in order.
        self.assertEqual(list(self.client.stream("m2")), [22] * 30)
        self.assertEqual(list(self.client.stream("m1")), [11] * 50)

    def test_cancel_after_completion_and_unknown_id_are_not_found(self):
        self.client.submit("done", prompt=[1, 2], max_tokens=3)
        self.assertEqual(len(list(self.client.stream("done"))), 3)
        self.assertEqual(self.client.cancel("done"), "not_found")
        self.assertEqual(self.client.cancel("never-submitted"), "not_found")

    def test_stats_routes_and_active_blocks_back_to_zero(self):
        self.client.submit("st", prompt=list(range(100, 140)), max_tokens=20)
        self.assertEqual(len(list(self.client.stream("st"))), 20)
        stats = self.client.stats()
        self.assertEqual(stats["routes"], 0)
        self.assertEqual(stats["clients"], [])
        self.assertEqual(len(stats["ranks"]), 1)
        rank = stats["ranks"][0]
        self.assertEqual(rank["dp_rank"], 0)
        self.assertEqual(rank["active_blocks"], 0)
        self.assertEqual(rank["kv_usage"], 0.0)
        self.assertEqual(rank["total_blocks"], 256)
        self.assertEqual((rank["running"], rank["waiting"]), (0, 0))
        self.assertGreaterEqual(rank["prefix_queries_tokens"], 40)

    def test_dp_rank_out_of_range_is_rejected(self):
        self.client.submit("bad-rank", prompt=[1, 2, 3], max_tokens=2, dp_rank=5)
        with self.assertRaises(SubmitRejected) as cm:
            list(self.client.stream("bad-rank"))
        self.assertIn("dp_rank", cm.exception.message["reason"])
        with self.assertRaises(ServerError) as cm:
            self.client.kv_snapshot(dp_rank=3)
        self.assertEqual(cm.exception.message["code"], "invalid_argument")

    def test_malformed_messages_get_errors_and_service_keeps_serving(self):
        cases = [
            (b"\xc1", "corruption", None),                          # not msgpack
            (msgpack.packb([1, 2]), "corruption", None),            # not a map
            (msgpack.packb({"type": "stats"}), "corruption", None),  # no "v"
            (encode_message("nonsense"), "corruption", None),       # unknown type
            (encode_message("submit", id="m-noprompt", max_tokens=2), "corruption",
             "m-noprompt"),                                          # missing field
            (encode_message("submit", id="m-str", prompt="abc", max_tokens=2), "corruption",
             "m-str"),                                               # wrong type
            (encode_message("submit", id="m-neg", prompt=[-1], max_tokens=2), "invalid_argument",
             "m-neg"),                                               # negative token
            (encode_message("submit", id="", prompt=[1], max_tokens=2), "invalid_argument",
             None),  # empty id
            (msgpack.packb({"v": 1, "type": "submit", "id": "m-trail", "prompt": [1],
                            "max_tokens": 1}) + b"\x00", "corruption", None),  # trailing byte
            (encode_message("submit_ack", id="x", dp_rank=0), "invalid_argument", None),
        ]
        for payload, code, id_ in cases:
            with self.subTest(payload=payload[:40]):
                self.client.send_raw(payload)
                m = recv_type(self.client, "error")
                if code is not None:
                    self.assertEqual(m["code"], code, m)
                self.assertTrue(m["message"], m)
                if id_ is not None:
                    self.assertEqual(m["id"], id_)
        # An id that is not UTF-8 (bytes ff fe 41): refused, and not echoed, so this client's
        # raw=False decoding reads the reply.
        bad_id = encode_message("submit", id="@@@", prompt=[1], max_tokens=1).replace(
            b"\xa3@@@", b"\xa3\xff\xfeA")
        self.client.send_raw(bad_id)
        m = recv_type(self.client, "error")
        self.assertEqual(m["code"], "corruption", m)
        self.assertIn("id: not valid UTF-8", m["message"])
        self.assertIsNone(m.get("id"), m)
        # Two frames where one is expected.
        self.client.send_raw(None, frames=[b"part1", encode_message("stats")])
        self.assertEqual(recv_type(self.client, "error")["code"], "corruption")
        # The cancel socket accepts only cancels.
        self.client.send_raw_cancel(encode_message("stats"))
        self.assertEqual(recv_type(self.client, "error")["code"], "invalid_argument")
        self.client.send_raw_cancel(b"\x93\x01")
        self.assertEqual(recv_type(self.client, "error")["code"], "corruption")
        # Still serving, this client included.
        self.client.submit("after-bad", prompt=[1, 2, 3], max_tokens=4)
        self.assertEqual(len(list(self.client.stream("after-bad"))), 4)

    def test_other_protocol_version_is_unsupported(self):
        self.client.send_raw(msgpack.packb({"v": 2, "type": "submit", "id": "v2", "prompt": [1],
                                            "max_tokens": 1}))
        m = recv_type(self.client, "error")
        self.assertEqual(m["code"], "unsupported")
        self.assertIn("version 2", m["message"])
        self.assertEqual(self.client.stats()["routes"], 0)  # nothing was submitted

    def test_mocker_submit_cli_streams_output(self):
        r = subprocess.run([MOCKER_BIN, "submit", "--tokens", "1,2,3", "--max-tokens", "3",
                            "--output-tokens", "7,8,9", "--id", "cli-1",
                            "--submit-endpoint", self.serve.submit,
                            "--cancel-endpoint", self.serve.cancel],
                           capture_output=True, text=True, timeout=WAIT_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[-1], "finish length")
        tokens = {}
        for line in lines[:-1]:
            index, *toks = line.split()
            for i, t in enumerate(toks):
                tokens[int(index) + i] = int(t)
        self.assertEqual(tokens, {0: 7, 1: 8, 2: 9})
        self.assertIn("accepted on dp_rank 0", r.stderr)

    def test_mocker_submit_cli_rejected_and_unreachable_exit_1(self):
        r = subprocess.run([MOCKER_BIN, "submit", "--prompt-len", "5", "--dp-rank", "9",
                            "--submit-endpoint", self.serve.submit,
                            "--cancel-endpoint", self.serve.cancel],
                           capture_output=True, text=True, timeout=WAIT_S)
        self.assertEqual(r.returncode, 1)
        self.assertIn("rejected", r.stderr)
        r = subprocess.run([MOCKER_BIN, "submit", "--prompt-len", "5", "--timeout-s", "0.2",
                            "--submit-endpoint", "tcp://127.0.0.1:1",
                            "--cancel-endpoint", "tcp://127.0.0.1:2"],
                           capture_output=True, text=True, timeout=WAIT_S)
        self.assertEqual(r.returncode, 1)
        # Nothing listens there: said after the one-second connection wait, with how to start one.
        self.assertIn("nothing answers at tcp://127.0.0.1:1", r.stderr)
        self.assertIn("mocker serve --submit-endpoint tcp://127.0.0.1:1", r.stderr)


class PacedTest(unittest.TestCase):
    """Paced service (fixed 2 ms passes, one running request): cancels, duplicates, live stats."""

    @classmethod
    def setUpClass(cls):
        cls.serve = Serve(*PACED_FLAGS, "--max-num-seqs", "1", "--block-size", "4",
                          "--num-gpu-blocks", "256")

    @classmethod
    def tearDownClass(cls):
        cls.serve.close()

    def setUp(self):
        self.client = self.serve.client()

    def tearDown(self):
        self.client.close()
        # Every test leaves the service idle (its requests ended), so the next starts clean.
        with self.serve.client() as c:
            poll_until(lambda: c.stats()["routes"] == 0, "the service to be idle")

    def test_cancel_mid_stream(self):
        self.client.submit("mid", prompt=[1, 2, 3, 4], max_tokens=LONG)
        gen = self.client.stream("mid")
        first = [next(gen) for _ in range(3)]
        self.assertEqual(len(first), 3)
        self.assertEqual(self.client.cancel("mid"), "applied")
        rest = list(gen)  # tokens already sent before the cancel, then the terminal
        self.assertLess(len(first) + len(rest), LONG)
        self.assertEqual(self.client.terminal("mid")["finish"], "cancelled")
        self.assertEqual(self.client.cancel("mid"), "not_found")  # a second cancel is a no-op
        self.assertIsNone(self.client.recv(0.05))

    def test_cancel_before_admission(self):
        self.client.submit("blocker", prompt=[1, 2, 3], max_tokens=LONG)
        gen = self.client.stream("blocker")
        next(gen)  # running: it holds the only seat (max_num_seqs 1)
        self.client.submit("queued", prompt=[9, 9, 9], max_tokens=5)
        self.client.wait_ack("queued")
        stats = self.client.stats()
        self.assertEqual((stats["ranks"][0]["running"], stats["ranks"][0]["waiting"]), (1, 1))
        self.assertEqual(stats["routes"], 2)
        self.assertEqual(stats["clients"], [{"client": self.client.routing_id, "routes": 2}])
        self.assertEqual(self.client.cancel("queued"), "applied")
        self.assertEqual(list(self.client.stream("queued")), [])  # never ran: no token
        self.assertEqual(self.client.terminal("queued")["finish"], "cancelled")
        self.assertEqual(self.client.cancel("blocker"), "applied")
        list(gen)
        self.assertEqual(self.client.terminal("blocker")["finish"], "cancelled")

    def test_cancel_of_another_clients_request_is_refused(self):
        with self.serve.client() as other:
            self.client.submit("theirs", prompt=[1, 2, 3], max_tokens=LONG)
            self.client.wait_ack("theirs")
            # Without `client`, the id is looked up among the sender's own requests.
            self.assertEqual(other.cancel("theirs"), "not_found")
            # Naming the owner's routing id is refused: requests belong to their submitter.
            with self.assertRaises(ServerError) as refused:
                other.cancel("theirs", client=self.client.routing_id)
            self.assertEqual(refused.exception.message["code"], "permission_denied")
            self.assertEqual(other.stats()["clients"], [])  # nor does it see the owner
            self.assertEqual(self.client.cancel("theirs", client=self.client.routing_id),
                             "applied")
            list(self.client.stream("theirs"))
            self.assertEqual(self.client.terminal("theirs")["finish"], "cancelled")

    def test_duplicate_active_id_rejected_then_reusable(self):
        self.client.submit("dup", prompt=[1, 2, 3], max_tokens=20)
        self.client.wait_ack("dup")
        self.client.submit("dup", prompt=[4, 5, 6], max_tokens=5)
        # The reject is for the second submit; the first stream is untouched.
        m = self.client._wait_for(lambda m: m["type"] == "submit_reject", WAIT_S, "reject")
        self.assertEqual(m["id"], "dup")
        self.assertIn("duplicate", m["reason"])
        self.assertEqual(len(list(self.client.stream("dup"))), 20)
        self.assertEqual(self.client.terminal("dup")["finish"], "length")
        self.client.submit("dup", prompt=[4, 5, 6], max_tokens=5)
        self.assertEqual(len(list(self.client.stream("dup"))), 5)
        self.assertEqual(self.client.terminal("dup")["finish"], "length")

    def test_stats_while_active_then_back_to_zero(self):
        self.client.submit("live", prompt=list(range(1, 18)), max_tokens=LONG)
        gen = self.client.stream("live")
        next(gen)
        stats = self.client.stats()
        self.assertEqual(stats["routes"], 1)
        self.assertGreaterEqual(stats["ranks"][0]["active_blocks"], 5)  # ceil(18 / 4)
        self.assertGreater(stats["ranks"][0]["kv_usage"], 0.0)
        self.client.cancel("live")
        list(gen)
        stats = self.client.stats()
        self.assertEqual(stats["routes"], 0)
        self.assertEqual(stats["ranks"][0]["active_blocks"], 0)

    def test_mocker_submit_ctrl_c_cancels(self):
        proc = subprocess.Popen([MOCKER_BIN, "submit", "--prompt-len", "8", "--max-tokens",
                                 str(LONG), "--submit-endpoint", self.serve.submit,
                                 "--cancel-endpoint", self.serve.cancel],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # Wait for the first output line: the request is streaming.
            ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
            self.assertTrue(ready, "no output from mocker submit")
            first = proc.stdout.readline().decode()
            self.assertTrue(first.startswith("0 "), first)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 130, err)
        self.assertTrue(out.decode().splitlines()[-1].startswith("finish cancelled"), out)


class KvTest(unittest.TestCase):
    """kv_snapshot against hashes recomputed from the prompts, and against the KV-event stream."""

    BLOCK = 4

    def test_snapshot_matches_recomputed_hashes_and_kv_events(self):
        serve = Serve("--speedup-ratio", "0", "--block-size", str(self.BLOCK), "--num-gpu-blocks",
                      "16")
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(serve.endpoints["kv_events[0]"])
        index = KvIndex(self.BLOCK)
        live = {}  # seq -> payload, as received on the SUB

        def drain_sub():
            while sub.poll(0):
                frames = sub.recv_multipart()
                self.assertEqual(len(frames), 3)
                self.assertEqual(frames[0], b"")
                self.assertEqual(len(frames[1]), 8)
                live[struct.unpack(">Q", frames[1])[0]] = frames[2]

        def catch_up():
            # A SUB may miss the first batches (slow joiner): fetch those from the replay socket,
            # then apply in seq order; a gap after the first live batch fails the test.
            drain_sub()
            if index.next_seq is None:
                # Nothing applied yet: everything before the first live batch comes from replay
                # (all of it if the SUB has not received anything yet — it may have joined after
                # the last batch was published).
                first = min(live) if live else None
                for seq, payload in replay_from(ctx, serve.endpoints["kv_replay[0]"], 0):
                    if first is None or seq < first:
                        index.apply(seq, payload, self)
                    elif seq in live:
                        self.assertEqual(payload, live[seq], "replay differs from live")
                for seq in [s for s in live if index.next_seq is not None and s < index.next_seq]:
                    del live[seq]  # already applied from the replay
            while index.next_seq in live or (index.next_seq is None and live):
                seq = min(live) if index.next_seq is None else index.next_seq
                index.apply(seq, live.pop(seq), self)

        healed = []  # seqs applied from the replay socket after the live stream had begun

        def heal():
            # PUB/SUB may drop a batch (protocol/README.md: consumers heal gaps from the replay
            # socket): apply what the ring holds from the next expected seq on, in order. A batch
            # the service never published is in no ring either, so this hides no engine bug.
            for seq, payload in replay_from(ctx, serve.endpoints["kv_replay[0]"], index.next_seq):
                if seq == index.next_seq:
                    index.apply(seq, payload, self)
                    live.pop(seq, None)
                    healed.append(seq)

        def converged(snapshot):
            catch_up()
            if index.hashes != set(snapshot) and index.next_seq is not None:
                heal()
                catch_up()
            return index.hashes == set(snapshot)

        try:
            with serve.client() as c:
                # Phase 1: no eviction (7 cached blocks of 16): the snapshot is exactly the
                # recomputed hashes of every computed token (prompt + all outputs but the last,
                # which is sampled but never computed — docs/engine.md, Stored events).
                runs = [
                    (list(range(1, 11)), None, 1),                        # 2 full blocks + 2
                    (list(range(1, 9)) + list(range(100, 108)), None, 1),  # shares 2 blocks
                    (list(range(200, 208)), [1, 2, 3, 4, 5], 5),          # outputs fill block 3
                ]
                expected = set()
                for n, (prompt, plan, max_tokens) in enumerate(runs):
                    c.submit("kv%d" % n, prompt=prompt, max_tokens=max_tokens, output_tokens=plan)
                    out = list(c.stream("kv%d" % n))
                    self.assertEqual(c.terminal("kv%d" % n)["finish"], "length")
                    expected |= set(sequence_hashes(prompt + out[:-1], self.BLOCK))
                self.assertEqual(len(expected), 7)
                snapshot = c.kv_snapshot()
                self.assertEqual(list(snapshot), [0])
                self.assertEqual(set(snapshot[0]), expected)
                self.assertEqual(snapshot, c.kv_snapshot(dp_rank=0))
                poll_until(lambda: converged(snapshot[0]), "the KV events to match the snapshot")
                self.assertEqual(index.removed, 0)

                # Phase 2: more distinct prompts than the pool holds: evictions (Removed events).
                for n in range(6):
                    prompt = [1000 * (n + 1) + i for i in range(12)]
                    c.submit("ev%d" % n, prompt=prompt, max_tokens=1)
                    list(c.stream("ev%d" % n))
                    expected |= set(sequence_hashes(prompt, self.BLOCK))
                snapshot = c.kv_snapshot()[0]
                self.assertLessEqual(len(snapshot), 16)
                self.assertTrue(set(snapshot) <= expected)
                poll_until(lambda: converged(snapshot), "the KV events to match the snapshot")
                self.assertGreater(index.removed, 0)
                self.assertEqual(index.stored - index.removed, len(snapshot))
                if healed:
                    print("KvTest: %d batch(es) healed from the replay socket: %s"
                          % (len(healed), healed[:10]), file=sys.stderr)
        finally:
            sub.close(0)
            ctx.term()
            serve.close()


class ShutdownTest(unittest.TestCase):
    def test_sigterm_ends_every_stream_with_shutdown_and_exits_0(self):
        serve = Serve(*PACED_FLAGS, "--block-size", "4")
        clients = [serve.client() for _ in range(3)]
        try:
            gens = []
            for i, c in enumerate(clients):
                for j in range(2):
                    rid = "sd%d" % j
                    c.submit(rid, prompt=[i + 1, j + 1, 3], max_tokens=LONG)
                    gens.append((c, rid, c.stream(rid)))
            for c, rid, gen in gens:
                next(gen)  # every request is streaming
            code = serve.terminate()
            self.assertEqual(code, 0, serve.stderr_text())
            for c, rid, gen in gens:
                list(gen)
                terminal = c.terminal(rid)
                self.assertEqual(terminal["finish"], "shutdown", terminal)
        finally:
            for c in clients:
                c.close()
            serve.close()


class CurveTest(unittest.TestCase):
    """CURVE end to end: keys from `mocker keygen`, a config file naming them, the Python client
    and `mocker submit` with allow-listed keys, and an unlisted key that gets nothing."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="mocker-curve-%d-" % os.getpid())
        for name in ("server", "alice", "mallory"):
            out = subprocess.run([MOCKER_BIN, "keygen", os.path.join(cls.dir.name, name)],
                                 capture_output=True, check=True).stdout.decode()
            assert out.startswith("public key "), out
        config = os.path.join(cls.dir.name, "mocker.toml")
        with open(config, "w") as f:
            # Relative key paths are relative to the configuration file.
            f.write('[security]\ncurve = true\nserver_secret_key_file = "server.key"\n'
                    'client_public_key_files = ["alice.pub"]\n')
        cls.serve = Serve("--config", config, *PACED_FLAGS, "--block-size", "4")

    @classmethod
    def tearDownClass(cls):
        cls.serve.close()
        cls.dir.cleanup()

    def key(self, name):
        return read_key_file(os.path.join(self.dir.name, name))

    def connect(self, who):
        return MockerClient.connect(self.serve.submit, self.serve.cancel,
                                    curve_server_key=self.key("server.pub"),
                                    curve_public_key=self.key(who + ".pub"),
                                    curve_secret_key=self.key(who + ".key"))

    def test_key_files_are_private_and_not_overwritten(self):
        self.assertEqual(os.stat(os.path.join(self.dir.name, "alice.key")).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.join(self.dir.name, "alice.pub")).st_mode & 0o777, 0o644)
        again = subprocess.run([MOCKER_BIN, "keygen", os.path.join(self.dir.name, "alice")],
                               capture_output=True)
        self.assertEqual(again.returncode, 1)
        self.assertIn(b"already exists (use --force", again.stderr)

    def test_allowed_key_streams(self):
        with self.connect("alice") as c:
            c.submit("r", prompt=[1, 2, 3, 4, 5], max_tokens=6)
            self.assertEqual(len(list(c.stream("r"))), 6)
            self.assertEqual(c.stats()["clients"], [])

    def test_unlisted_key_gets_nothing(self):
        with self.connect("mallory") as c:  # an unlisted key
            self.assert_gets_nothing(c)
            # Its handshake reaches ZAP only while the socket is open (on a loaded machine 0.4 s
            # may pass before it even connects): the refusal is awaited before closing it.
            poll_until(lambda: "is not in the allow-list" in self.serve.stderr_text(),
                       "the refusal in the service's log")
        with self.serve.client() as c:  # no CURVE at all
            self.assert_gets_nothing(c)

    def assert_gets_nothing(self, c):
        # Non-blocking: a refused handshake may leave the DEALER without any peer.
        try:
            c._submit.send(encode_message("stats"), zmq.NOBLOCK)
        except zmq.Again:
            pass
        self.assertIsNone(c.recv(0.4))

    def test_mocker_submit_with_keys(self):
        d = self.dir.name
        run = subprocess.run([MOCKER_BIN, "submit", "--prompt-len", "4", "--max-tokens", "3",
                              "--submit-endpoint", self.serve.submit,
                              "--cancel-endpoint", self.serve.cancel,
                              "--curve-server-key-file", os.path.join(d, "server.pub"),
                              "--curve-secret-key-file", os.path.join(d, "alice.key")],
                             capture_output=True, timeout=WAIT_S)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.decode().splitlines()[-1], "finish length")


class DecoderTest(unittest.TestCase):
    """The client's own strict validation of what a service sends (no service needed)."""

    def decode(self, m):
        return decode_message(msgpack.packb(m, use_bin_type=True))

    def test_accepts_protocol_readme_examples(self):
        out = bytes.fromhex(
            "83a17601a474797065a66f7574707574a76f7574707574739484a26964a27231a5696e64657800a674"
            "6f6b656e7391cd6193ad6361636865645f746f6b656e731083a26964a27232a5696e64657805a6746f"
            "6b656e7392cd1b7ccd03e985a26964a27233a5696e64657802a6746f6b656e7390a666696e697368a9"
            "63616e63656c6c6564a6726561736f6eb363616e63656c6c656420627920636c69656e7484a26964a2"
            "7234a5696e64657809a6746f6b656e7391cd04d2a666696e697368a66c656e677468")
        m = decode_message(out)
        self.assertEqual([e["id"] for e in m["outputs"]], ["r1", "r2", "r3", "r4"])
        self.assertEqual(m["outputs"][0]["cached_tokens"], 16)
        self.assertIsNone(m["outputs"][1]["finish"])
        self.assertEqual(m["outputs"][2]["reason"], "cancelled by client")
        snap = decode_message(bytes.fromhex(
            "83a17601a474797065b16b765f736e617073686f745f7265706c79a572616e6b739282a764705f7261"
            "6e6b00ac626c6f636b5f68617368657393cf44a2b2379d6d3c3dcfaea1e67a6c80cf84cfcb38e4d7fb"
            "2dca5c82a764705f72616e6b01ac626c6f636b5f68617368657390"))
        self.assertEqual(snap["ranks"][0]["block_hashes"][0], 0x44a2b2379d6d3c3d)

    def test_refuses_invalid_messages(self):
        ok_out = {"v": 1, "type": "output", "outputs": [{"id": "a", "index": 0, "tokens": [1]}]}
        self.decode(ok_out)
        bad = [
            ({"type": "output", "outputs": []}, "v: missing"),
            ({"v": 2, "type": "output", "outputs": []}, "version 2"),
            ({"v": True, "type": "output", "outputs": []}, "v: expected unsigned"),
            ({"v": 1}, "type: missing"),
            ({"v": 1, "type": "submit", "id": "x", "prompt": [], "max_tokens": 1}, "type"),
            ({"v": 1, "type": "bogus"}, "type"),
            ({"v": 1, "type": "output", "outputs": [{"id": "a", "index": 0, "tokens": []}]},
             "no tokens"),
            ({"v": 1, "type": "output", "outputs": [{"id": "a", "index": 0, "tokens": [2 ** 32]}]},
             "outputs[0].tokens[0]"),
            ({"v": 1, "type": "output", "outputs": [{"id": "a", "index": 0, "tokens": [1],
                                                     "finish": "done"}]}, "outputs[0].finish"),
            ({"v": 1, "type": "output", "outputs": [{"index": 0, "tokens": [1]}]},
             "outputs[0].id: missing"),
            ({"v": 1, "type": "cancel_reply", "id": "a", "result": "maybe"}, "result"),
            ({"v": 1, "type": "error", "code": "oops", "message": "m"}, "code"),
            ({"v": 1, "type": "submit_ack", "id": "a", "dp_rank": -1}, "dp_rank"),
            ({"v": 1, "type": "kv_snapshot_reply",
              "ranks": [{"dp_rank": 0, "block_hashes": [5, 5]}]}, "strictly ascending"),
            ({"v": 1, "type": "stats_reply", "ranks": [], "routes": 0,
              "clients": [{"client": 5, "routes": 1}]}, "clients[0].client"),
        ]
        for m, needle in bad:
            with self.subTest(m=m):
                with self.assertRaises(ProtocolError) as cm:
                    self.decode(m)
                self.assertIn(needle, str(cm.exception))
        # protocol/README.md §1.5 "handoff" (tests/data/protocol/client_handoff.hex).
        with open(os.path.join(SOURCE_DIR, "tests/data/protocol/client_handoff.hex")) as f:
            h = decode_message(bytes.fromhex(f.read().strip()))
        self.assertEqual(h["ticket"]["key"], bytes(range(0xa0, 0xb0)))
        self.assertEqual((h["id"], h["ticket"]["prompt_len"], h["ticket"]["transfer_ms"]),
                         ("r1", 40, 1.25))
        # The ticket goes back unchanged: the decode submit is byte for byte §1.5 "submit_handoff".
        with open(os.path.join(SOURCE_DIR, "tests/data/protocol/client_submit_handoff.hex")) as f:
            self.assertEqual(encode_message("submit", id="d1", prompt=list(range(1, 41)),
                                            max_tokens=4, handoff=h["ticket"]).hex(),
                             f.read().strip())
        ticket = {"source": "tcp://127.0.0.1:7000", "key": b"k" * 16, "source_rank": 0,
                  "block_size": 4, "prompt_len": 9, "cached_tokens": 0, "transfer_ms": 0.5}
        m = self.decode({"v": 1, "type": "handoff", "id": "a", "ticket": dict(ticket, extra=1)})
        self.assertEqual(m["ticket"]["key"], b"k" * 16)
        self.assertEqual(m["ticket"]["extra"], 1)  # unknown keys are kept (passed through)
        bad_tickets = [
            (dict(ticket, key=b"short"), "ticket.key: 5 bytes, expected 16"),
            (dict(ticket, key="k" * 16), "ticket.key: expected bin"),
            (dict(ticket, source=""), "ticket.source: empty"),
            (dict(ticket, block_size=2 ** 32), "ticket.block_size"),
            (dict(ticket, transfer_ms=-1.0), "ticket.transfer_ms"),
            ({k: v for k, v in ticket.items() if k != "prompt_len"}, "ticket.prompt_len: missing"),
            ([1, 2], "ticket: expected map"),
        ]
        for t, needle in bad_tickets:
            with self.subTest(ticket=t):
                with self.assertRaises(ProtocolError) as cm:
                    self.decode({"v": 1, "type": "handoff", "id": "a", "ticket": t})
                self.assertIn(needle, str(cm.exception))
        for raw in (b"", b"\xc1", b"\x91\x01", msgpack.packb({"v": 1}) + b"\x00",
                    msgpack.packb({1: 2})):
            with self.subTest(raw=raw):
                with self.assertRaises(ProtocolError):
                    decode_message(raw)


class ScriptedWorker:
    """A scripted two-hop worker (no service): submit and cancel ROUTERs on ephemeral ports,
    served by a thread, speaking protocol v1. `role` "prefill": a submit → submit_ack, then a
    `handoff` (key = the id padded to 16 bytes) — or, for `hold=True`, nothing until told
    (`release(id)` sends the handoff). "decode": a submit with a ticket → submit_ack and
    `max_tokens` tokens in one message each — or, with `hold=True`, only the ack. A cancel →
    cancel_reply (applied while it holds the id, which then gets a terminal `cancelled`). `reject` (a str): every submit is refused with that reason. Records what it
    received (`submits`, `cancels`)."""

    def __init__(self, role, hold=False, reject=None):
        self.role, self.hold, self.reject = role, hold, reject
        self.ctx = zmq.Context()
        self.submit_sock = self.ctx.socket(zmq.ROUTER)
        self.cancel_sock = self.ctx.socket(zmq.ROUTER)
        for sock in (self.submit_sock, self.cancel_sock):
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(EPHEMERAL)
        self.submit = self.submit_sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.cancel = self.cancel_sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.submits, self.cancels = [], []
        self.held = {}  # id -> (routing id, submit)
        self.todo = []  # ids to release (from the test thread)
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._loop)
        self.thread.start()

    @staticmethod
    def ticket(m):
        return {"source": "tcp://127.0.0.1:9", "key": m["id"].encode().ljust(16, b"."),
                "source_rank": 0, "block_size": 4, "prompt_len": len(m["prompt"]),
                "cached_tokens": 2, "transfer_ms": 0.5}

    def release(self, id):
        with self.lock:
            self.todo.append(id)

    def close(self):
        self.stop = True
        self.thread.join()
        self.submit_sock.close(0)
        self.cancel_sock.close(0)
        self.ctx.term()

    def _send(self, sock, rid, type_, **fields):
        sock.send_multipart([rid, msgpack.packb(dict(v=1, type=type_, **fields),
                                                use_bin_type=True)])

    def _loop(self):
        poller = zmq.Poller()
        poller.register(self.submit_sock, zmq.POLLIN)
        poller.register(self.cancel_sock, zmq.POLLIN)
        while not self.stop:
            events = dict(poller.poll(10))
            with self.lock:
                todo, self.todo = self.todo, []
            for id in todo:
                if id in self.held:
                    rid, m = self.held.pop(id)
                    self._send(self.submit_sock, rid, "handoff", id=id, ticket=self.ticket(m))
            for sock in (self.cancel_sock, self.submit_sock):
                if not events.get(sock):
                    continue
                rid, payload = sock.recv_multipart()
                m = msgpack.unpackb(payload, raw=False)
                if m["type"] == "cancel":
                    self.cancels.append(m["id"])
                    held = self.held.pop(m["id"], None)
                    self._send(sock, rid, "cancel_reply", id=m["id"],
                               result="applied" if held else "not_found")
                    if held:
                        self._send(self.submit_sock, rid, "output", outputs=[
                            {"id": m["id"], "index": 0, "tokens": [], "finish": "cancelled"}])
                    continue
                if m["type"] != "submit":
                    continue
                self.submits.append(m)
                if self.reject:
                    self._send(sock, rid, "submit_reject", id=m["id"], reason=self.reject)
                    continue
                self._send(sock, rid, "submit_ack", id=m["id"], dp_rank=0)
                if self.hold:
                    self.held[m["id"]] = (rid, m)
                elif self.role == "prefill":
                    self._send(sock, rid, "handoff", id=m["id"], ticket=self.ticket(m))
                else:
                    for i in range(m["max_tokens"]):
                        e = {"id": m["id"], "index": i, "tokens": [100 + i]}
                        if i == 0:
                            e["cached_tokens"] = m["handoff"]["cached_tokens"]
                        if i + 1 == m["max_tokens"]:
                            e["finish"] = "length"
                        self._send(sock, rid, "output", outputs=[e])


class DisaggregatedClientScriptedTest(unittest.TestCase):
    """DisaggregatedClient's own rules against scripted workers: the decode submit repeats the
    request with the ticket unchanged, each stage's cancel goes to the right worker, errors
    name the hop, and a plain client meeting a handoff says so."""

    def workers(self, prefill=None, decode=None):
        p = ScriptedWorker("prefill", **(prefill or {}))
        d = ScriptedWorker("decode", **(decode or {}))
        self.addCleanup(p.close)
        self.addCleanup(d.close)
        c = DisaggregatedClient.connect(p.submit, p.cancel, d.submit, d.cancel)
        self.addCleanup(c.close)
        return p, d, c

    def test_two_hops_pass_the_ticket_unchanged(self):
        p, d, c = self.workers()
        self.assertEqual(list(c.generate("g1", prompt=[1, 2, 3, 4, 5], max_tokens=3)),
                         [100, 101, 102])
        self.assertEqual(c.terminal("g1")["finish"], "length")
        self.assertEqual((c.stage("g1"), c.terminal_hop("g1")), ("ended", "decode"))
        self.assertEqual(d.submits[0]["handoff"], ScriptedWorker.ticket(p.submits[0]))
        self.assertEqual((d.submits[0]["prompt"], d.submits[0]["max_tokens"]), ([1, 2, 3, 4, 5], 3))
        self.assertNotIn("handoff", p.submits[0])
        t = c.timings("g1")
        self.assertEqual(sorted(t), ["decode_ack", "decode_submit", "first_token", "handoff",
                                     "prefill_ack", "terminal"])
        self.assertTrue(0 <= t["prefill_ack"] <= t["handoff"] <= t["decode_submit"]
                        <= t["decode_ack"] <= t["first_token"] <= t["terminal"], t)

    def test_cancel_before_the_handoff_goes_to_the_prefill_worker(self):
        p, d, c = self.workers(prefill={"hold": True})
        c.submit("c1", prompt=[1, 2, 3], max_tokens=4)
        c.prefill.wait_ack("c1")  # held there (a cancel may otherwise overtake the submit)
        self.assertEqual(c.cancel("c1"), "applied")
        self.assertEqual((c.last_cancel_hop, p.cancels, d.cancels), ("prefill", ["c1"], []))
        self.assertEqual(list(c.stream("c1")), [])  # the prefill worker's terminal
        self.assertEqual((c.terminal("c1")["finish"], c.terminal_hop("c1")),
                         ("cancelled", "prefill"))
        self.assertEqual(d.submits, [])

    def test_cancel_while_the_handoff_is_on_its_way_is_never_decoded(self):
        p, d, c = self.workers()
        c.submit("c0", prompt=[1, 2, 3], max_tokens=4)  # the handoff is sent at once, unread
        c.prefill.wait_ack("c0")
        self.assertEqual(c.cancel("c0"), "not_found")
        self.assertEqual(c.last_cancel_hop, "prefill")
        self.assertEqual(list(c.stream("c0")), [])
        self.assertEqual(c.terminal("c0")["finish"], "cancelled")
        self.assertIsNotNone(c.ticket("c0"))
        self.assertEqual(d.submits, [])

    def test_cancel_after_the_handoff_before_the_decode_submit(self):
        p, d, c = self.workers()
        c.submit("c2", prompt=[1, 2, 3], max_tokens=4)
        self.assertEqual(c.wait_handoff("c2")["key"], b"c2" + b"." * 14)
        self.assertEqual(c.stage("c2"), "handoff")
        self.assertEqual(c.cancel("c2"), "not_found")  # the scripted worker no longer holds it
        self.assertEqual(c.last_cancel_hop, "prefill")
        self.assertEqual(list(c.stream("c2")), [])
        self.assertEqual((c.terminal("c2")["finish"], c.terminal_hop("c2")),
                         ("cancelled", "prefill"))
        self.assertEqual(d.submits, [])

    def test_cancel_after_the_decode_submit_goes_to_the_decode_worker(self):
        p, d, c = self.workers(decode={"hold": True})
        c.submit("c3", prompt=[1, 2, 3], max_tokens=4)
        c.wait_handoff("c3")
        c.submit_decode("c3")
        self.assertEqual(c.stage("c3"), "decode")
        c.decode.wait_ack("c3")
        self.assertEqual(c.cancel("c3"), "applied")
        self.assertEqual((c.last_cancel_hop, p.cancels, d.cancels), ("decode", [], ["c3"]))
        self.assertEqual(list(c.stream("c3")), [])
        self.assertEqual(c.terminal("c3")["finish"], "cancelled")

    def test_rejects_name_the_hop(self):
        _, _, c = self.workers(prefill={"reject": "prompt too long"})
        with self.assertRaises(SubmitRejected) as cm:
            list(c.generate("e1", prompt=[1], max_tokens=1))
        self.assertEqual(cm.exception.hop, "prefill")
        self.assertIn("prefill worker: submit 'e1' rejected: prompt too long", str(cm.exception))
        _, d, c = self.workers(decode={"reject": "handoff block_size 4 != 8"})
        with self.assertRaises(SubmitRejected) as cm:
            list(c.generate("e2", prompt=[1], max_tokens=1))
        self.assertEqual(cm.exception.hop, "decode")
        self.assertIn("decode worker: submit 'e2' rejected: handoff block_size 4 != 8",
                      str(cm.exception))
        self.assertEqual(c.stage("e2"), "ended")
        self.assertEqual(recv_type(c.prefill, "cancel_reply")["id"], "e2")  # KV released

    def test_plain_stream_meeting_a_handoff_raises_handed_off(self):
        p = ScriptedWorker("prefill")
        self.addCleanup(p.close)
        with MockerClient.connect(p.submit, p.cancel) as c:
            c.submit("h1", prompt=[1, 2], max_tokens=2)
            with self.assertRaises(HandedOff) as cm:
                list(c.stream("h1"))
            self.assertEqual(cm.exception.message["ticket"]["prompt_len"], 2)


class DisaggregatedServeTest(unittest.TestCase):
    """DisaggregatedClient against real `mocker serve --worker-type prefill` and `--worker-type
    decode` child processes (paced: prefill passes of 200 ms, decode passes of 2 ms, so each
    stage lasts long enough to cancel in): tokens, ticket, timings, cancel at both stages (the
    prefill worker's held KV is released every time), rejects naming the hop."""

    @classmethod
    def setUpClass(cls):
        common = ["--block-size", "4", "--num-gpu-blocks", "256", "--speedup-ratio", "1",
                  "--timing-model", "fixed", "--fixed-prefill-ms", "200", "--fixed-decode-ms",
                  "2", "--handoff-endpoint", EPHEMERAL]
        cls.prefill = Serve("--worker-type", "prefill", *common)
        try:
            cls.decode = Serve("--worker-type", "decode", *common)
        except Exception:
            cls.prefill.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.decode.close()
        cls.prefill.close()

    def setUp(self):
        self.c = DisaggregatedClient.connect(self.prefill.submit, self.prefill.cancel,
                                             self.decode.submit, self.decode.cancel)

    def tearDown(self):
        self.c.close()
        # Every test leaves both workers idle, the prefill worker holding no KV.
        for serve in (self.prefill, self.decode):
            with serve.client() as c:
                poll_until(lambda: c.stats()["routes"] == 0 and all(
                    not r["held"] and r["active_blocks"] == 0 for r in c.stats()["ranks"]),
                    "an idle worker holding no KV")

    def test_two_hops_stream_the_planned_tokens(self):
        tokens = list(self.c.generate("d1", prompt=list(range(1, 18)), max_tokens=5,
                                      output_tokens=[7, 8, 9, 10, 11]))
        self.assertEqual(tokens, [7, 8, 9, 10, 11])
        self.assertEqual(self.c.terminal("d1")["finish"], "length")
        t = self.c.ticket("d1")
        self.assertEqual((t["prompt_len"], t["block_size"], len(t["key"])), (17, 4, 16))
        self.assertTrue(t["source"].startswith("tcp://"), t["source"])
        self.assertEqual(t["source"], self.prefill.endpoints["handoff"])
        timings = self.c.timings("d1")
        # The prefill pass is modelled at 200 ms and paced in real time.
        self.assertGreaterEqual(timings["handoff"], 150.0, timings)
        self.assertLessEqual(timings["handoff"], timings["first_token"])

    def test_cancel_on_the_prefill_worker_before_the_handoff(self):
        self.c.submit("x1", prompt=list(range(1, 9)), max_tokens=4)
        self.c.prefill.wait_ack("x1")
        self.assertEqual(self.c.cancel("x1"), "applied")
        self.assertEqual(self.c.last_cancel_hop, "prefill")
        self.assertEqual(list(self.c.stream("x1")), [])
        self.assertEqual((self.c.terminal("x1")["finish"], self.c.terminal_hop("x1")),
                         ("cancelled", "prefill"))

    def test_cancel_on_the_prefill_worker_after_the_handoff(self):
        self.c.submit("x2", prompt=list(range(1, 9)), max_tokens=4)
        self.c.wait_handoff("x2")
        with self.prefill.client() as probe:
            self.assertEqual(probe.stats()["ranks"][0]["held"], 1)
        self.assertEqual(self.c.cancel("x2"), "applied")  # frees the held KV
        self.assertEqual(self.c.last_cancel_hop, "prefill")
        self.assertEqual(list(self.c.stream("x2")), [])
        self.assertEqual(self.c.terminal("x2")["finish"], "cancelled")

    def test_cancel_on_the_decode_worker_mid_stream(self):
        self.c.submit("x3", prompt=list(range(1, 9)), max_tokens=LONG)
        gen = self.c.stream("x3")
        first = [next(gen) for _ in range(3)]
        self.assertEqual(len(first), 3)
        self.assertEqual(self.c.cancel("x3"), "applied")
        self.assertEqual(self.c.last_cancel_hop, "decode")
        list(gen)
        self.assertEqual((self.c.terminal("x3")["finish"], self.c.terminal_hop("x3")),
                         ("cancelled", "decode"))

    def test_rejects_name_the_hop(self):
        # A plain (ticketless) submit to the decode worker, and a ticket to the prefill worker.
        with self.decode.client() as d:
            d.submit("p1", prompt=[1, 2, 3], max_tokens=1)
            with self.assertRaises(SubmitRejected):
                d.wait_ack("p1")
        self.c.submit("r1", prompt=[1, 2, 3, 4, 5], max_tokens=2)
        ticket = self.c.wait_handoff("r1")
        with self.prefill.client() as p:
            p.submit("r1b", prompt=[1, 2, 3, 4, 5], max_tokens=2, handoff=ticket)
            with self.assertRaises(SubmitRejected):
                p.wait_ack("r1b")
        # A ticket whose prompt length does not match: the decode worker refuses it.
        self.c._state("r1")["prompt"] = [1, 2, 3]
        with self.assertRaises(SubmitRejected) as cm:
            list(self.c.stream("r1"))
        self.assertEqual(cm.exception.hop, "decode")
        self.assertIn("decode worker: ", str(cm.exception))
        # The client released the prefill worker's held KV (tearDown checks held 0).
        self.assertEqual(recv_type(self.c.prefill, "cancel_reply")["result"], "applied")


class DisaggregatedReplayTest(unittest.TestCase):
    """`mocker replay` through real `mocker serve --worker-type prefill|decode` child processes:
    the prefill server by its fleet file (`--prefill-fleet`; serve runs one prefill or decode
    worker per process), two decode servers by `--connect-decode` / `--connect-decode-cancel`."""

    def test_replay_through_prefill_and_decode_servers(self):
        d = tempfile.mkdtemp(prefix="mocker-disagg-replay-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        fleet = os.path.join(d, "prefill.json")
        common = ["--handoff-endpoint", EPHEMERAL, "--speedup-ratio", "10",
                  "--allow-empty-output"]
        servers = []
        try:
            servers.append(Serve("--worker-type", "prefill", "--fleet-file", fleet, *common))
            for _ in range(2):
                servers.append(Serve("--worker-type", "decode", *common))
            report = os.path.join(d, "report.json")
            args = [MOCKER_BIN, "replay", os.path.join(SOURCE_DIR, "tests/data/tiny_trace.jsonl"),
                    "--prefill-fleet", fleet, "--decode-router", "random", "--router-seed", "3",
                    "--arrival-speedup-ratio", "10", "--no-progress", "--report-json", report]
            for s in servers[1:]:
                args += ["--connect-decode", s.submit, "--connect-decode-cancel", s.cancel]
            r = subprocess.run(args, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("Live disaggregated: 1 prefill + 2 decode server(s)", r.stdout)
            self.assertIn("Live timing: decode server 1 published", r.stdout)
            with open(report) as f:
                j = json.load(f)
            # The trace's 0-token request completes on the prefill server: nothing to decode.
            self.assertEqual((j["completed_requests"], j["handoffs"], j["handoff_activations"],
                              j["handoffs_refused"], j["expired_holds"]), (8, 7, 7, 0, 0))
            self.assertIn("7 handoffs, 7 decode acks, 7 decode streams started, 0 decode "
                          "rejects, 1 ended on the prefill server, 0 expired holds", r.stdout)
            self.assertEqual(j["identity"]["num_workers"], 3)
            self.assertEqual(j["identity"]["router"], "round_robin (prefill), random (decode)")
            # Every hold was fetched: the prefill server holds nothing afterwards.
            with servers[0].client() as c:
                self.assertEqual(c.stats()["ranks"][0]["held"], 0)
        finally:
            for s in servers:
                s.close()


class FleetTest(unittest.TestCase):
    """`mocker serve --num-workers 4 --fleet-file`: the fleet file's consumers against a real
    child process on ephemeral ports — this client (load_fleet), `mocker replay --mode live
    --fleet` and `mocker index --fleet --verify --once`."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="mocker-fleet-")
        self.fleet_file = os.path.join(self.dir.name, "fleet.json")

    def tearDown(self):
        self.dir.cleanup()

    def test_fleet_file_drives_clients_live_replay_and_index(self):
        serve = Serve("--num-workers", "4", "--dp-size", "2", "--fpm-worker-id", "100",
                      "--fleet-file", self.fleet_file, "--speedup-ratio", "0")
        try:
            fleet = load_fleet(self.fleet_file)  # written before `ready`
            self.assertEqual(fleet.dp_size, 2)
            self.assertEqual(fleet.block_size, 64)
            self.assertEqual(fleet.engine_type, "vllm")
            self.assertEqual(fleet.http, serve.endpoints["http"])
            self.assertEqual([w.worker_id for w in fleet.workers], [100, 101, 102, 103])
            addresses = set()
            for i, w in enumerate(fleet.workers):
                # The file says what the process printed, resolved (no `*`).
                self.assertEqual(w.submit, serve.endpoints["worker[%d].submit" % i])
                self.assertEqual(w.cancel, serve.endpoints["worker[%d].cancel" % i])
                self.assertEqual(serve.endpoints["worker[%d].worker_id" % i], str(w.worker_id))
                for r in w.ranks:
                    self.assertEqual(r.kv_events,
                                     serve.endpoints["worker[%d].kv_events[%d]" % (i, r.dp_rank)])
                    addresses.update([r.kv_events, r.kv_replay, r.fpm])
                addresses.update([w.submit, w.cancel])
            self.assertEqual(len(addresses), 4 * (2 + 3 * 2))
            self.assertFalse(any(a.endswith(":*") for a in addresses))
            # Each worker answers on its own submit socket, stats included.
            for w in fleet.workers:
                with MockerClient.connect(w.submit, w.cancel) as c:
                    c.submit("probe", prompt=list(range(1, 9)), max_tokens=2)
                    self.assertEqual(len(list(c.stream("probe"))), 2)
                    self.assertEqual(len(c.stats()["ranks"]), 2)
            # A live replay over the 4 workers (cancel endpoints from the file), then the index
            # of all 8 (worker, rank) streams must match every worker's kv_snapshot.
            trace = os.path.join(SOURCE_DIR, "tests", "data", "tiny_trace.jsonl")
            report = os.path.join(self.dir.name, "report.json")
            r = subprocess.run([MOCKER_BIN, "replay", trace, "--fleet", self.fleet_file,
                                "--router", "round_robin", "--arrival-speedup-ratio", "100",
                                "--report-json", report],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(report) as f:
                identity = json.load(f)["identity"]
            self.assertEqual(identity["servers"], [w.submit for w in fleet.workers])
            # The kv router subscribes to every (worker, rank) stream the file names (their
            # ports follow the fleet's port plan, not "submit + 2") and hashes with its block size.
            r = subprocess.run([MOCKER_BIN, "replay", trace, "--fleet", self.fleet_file,
                                "--router", "kv", "--arrival-speedup-ratio", "100",
                                "--report-json", report],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(report) as f:
                self.assertEqual(json.load(f)["identity"]["router"], "kv")
            r = subprocess.run([MOCKER_BIN, "index", "--fleet", self.fleet_file, "--verify",
                                "--once", "--query-endpoint", "none", "--stats-interval-s", "0"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for w in fleet.workers:
                for rank in (0, 1):
                    self.assertIn("worker %d rank %d: " % (w.worker_id, rank), r.stdout)
            self.assertNotIn("differ", r.stdout)
            self.assertEqual(r.stdout.count(" — same"), 8, r.stdout)
            # SIGTERM stops every worker; each logs under its own name.
            self.assertEqual(serve.terminate(), 0, serve.stderr_text())
            log = serve.stderr_text()
            for w in fleet.workers:
                self.assertIn("[serve[%d]] shutting down" % w.worker_id, log)
        finally:
            serve.close()

    def test_load_fleet_names_what_is_wrong(self):
        for text, needle in [("nope", "not JSON"), ("[]", "not a mocker fleet file"),
                             ('{"format": "mocker-fleet", "version": 9}', "version 9"),
                             ('{"format": "mocker-fleet", "version": 1, "mocker_version": "x",'
                              ' "model_name": "m", "engine_type": "vllm", "block_size": 64,'
                              ' "dp_size": 1, "http": null, "workers": []}', "workers")]:
            with self.subTest(text=text):
                with open(self.fleet_file, "w") as f:
                    f.write(text)
                with self.assertRaises(ValueError) as cm:
                    load_fleet(self.fleet_file)
                self.assertIn(needle, str(cm.exception))
                self.assertIn(self.fleet_file, str(cm.exception))

    def test_load_fleet_reads_the_optional_handoff_endpoint(self):
        def fleet(handoff_json):
            rank = '{"dp_rank": 0, "kv_events": null, "kv_replay": null, "fpm": null}'
            return ('{"format": "mocker-fleet", "version": 1, "mocker_version": "x",'
                    ' "model_name": "m", "engine_type": "vllm", "block_size": 64, "dp_size": 1,'
                    ' "http": null, "workers": ['
                    '{"worker_id": 0, "submit": "tcp://a:1", "cancel": "tcp://a:2",'
                    ' "ranks": [%s]%s},'
                    '{"worker_id": 1, "submit": "tcp://b:1", "cancel": "tcp://b:2",'
                    ' "ranks": [%s]}]}' % (rank, handoff_json, rank))
        with open(self.fleet_file, "w") as f:
            f.write(fleet(', "handoff": "tcp://a:3"'))
        workers = load_fleet(self.fleet_file).workers
        self.assertEqual(workers[0].handoff, "tcp://a:3")
        self.assertIsNone(workers[1].handoff)  # key absent: not a prefill worker
        with open(self.fleet_file, "w") as f:
            f.write(fleet(', "handoff": 5'))
        with self.assertRaises(ValueError) as cm:
            load_fleet(self.fleet_file)
        self.assertIn("workers[0].handoff", str(cm.exception))

    def test_second_process_on_the_same_http_port_names_the_flag(self):
        first = Serve()
        try:
            port = first.endpoints["http"].rsplit(":", 1)[1]
            eph = ["--submit-endpoint", EPHEMERAL, "--cancel-endpoint", EPHEMERAL,
                   "--kv-events-endpoint", EPHEMERAL, "--kv-replay-endpoint", EPHEMERAL,
                   "--fpm-endpoint", EPHEMERAL]
            r = subprocess.run([MOCKER_BIN, "serve", *eph, "--http-endpoint", "127.0.0.1:" + port],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("give --http-endpoint another address", r.stderr)
        finally:
            first.close()


def main():
    global MOCKER_BIN
    args = sys.argv[1:]
    if args and not args[0].startswith("-") and os.path.isfile(args[0]):
        MOCKER_BIN = args.pop(0)
    else:
        MOCKER_BIN = os.environ.get("MOCKER_BIN")
    if not MOCKER_BIN or not os.access(MOCKER_BIN, os.X_OK):
        sys.exit("test_mocker_client.py: pass the mocker binary as argv[1] or MOCKER_BIN "
                 "(got %r)" % MOCKER_BIN)
    unittest.main(argv=[sys.argv[0], *args])


if __name__ == "__main__":
    main()
