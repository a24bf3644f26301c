#!/usr/bin/python3
"""Memory hostility fault test: a real `mocker serve` child process under an address-space limit.

Usage: memory_hostility_test.py [unittest args]   (MOCKER_BIN=path/to/mocker)

The child gets RLIMIT_AS (`ulimit -v`) set between fork and exec: the service's own address
space at `ready` (measured on an unlimited run) plus LIMIT_MARGIN_MIB. Then

1. one client queues 1,000 requests with max_tokens 1,000,000: every one is acknowledged and the
   process stays alive (before memory followed work, each reserved 4 B × max_tokens and the
   process died with std::bad_alloc after about a hundred of them);
2. the same client pushes requests with 1,000,000-token prompts (4 MB each once queued) until the
   limit is really reached: each is acknowledged or refused with an `error` of code
   `resource_exhausted` naming its id — nothing else — and the process does not crash;
3. that client cancels everything it queued, and another client is served normally.

VmSize / VmRSS of the child are printed after each phase. Every wait polls with a deadline;
every endpoint is an ephemeral loopback port. Needs only Debian's python3-zmq and python3-msgpack.
"""

import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import msgpack

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))
from mocker_client import MockerClient  # noqa: E402

MOCKER_BIN = os.environ.get("MOCKER_BIN")
EPHEMERAL = "tcp://127.0.0.1:*"
ENDPOINT_FLAGS = ["--submit-endpoint", EPHEMERAL, "--cancel-endpoint", EPHEMERAL,
                  "--kv-events-endpoint", EPHEMERAL, "--kv-replay-endpoint", EPHEMERAL,
                  "--fpm-endpoint", EPHEMERAL, "--http-endpoint", "127.0.0.1:0"]
# One running request at a time: everything else stays queued, which is what costs memory here.
SERVE_FLAGS = ["--max-num-seqs", "1"]
LIMIT_MARGIN_MIB = 512
QUEUED = 1000
QUEUED_MAX_TOKENS = 1_000_000
BIG_PROMPT = 1_000_000  # tokens (4 MB once queued); the protocol allows 1 Mi
MAX_BIG = 1000          # the limit must be reached well before this many big prompts
REFUSALS_WANTED = 3
WAIT_S = 60.0


def vm_status(pid):
    """VmPeak, VmSize, VmRSS of `pid` in MiB."""
    out = {}
    with open("/proc/%d/status" % pid, encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmPeak", "VmSize", "VmRSS"):
                out[key] = int(value.split()[0]) / 1024.0
    return out


def figures(pid):
    v = vm_status(pid)
    return "VmSize %.0f MiB, VmRSS %.0f MiB, VmPeak %.0f MiB" % (v["VmSize"], v["VmRSS"],
                                                                  v["VmPeak"])


class Serve:
    """`mocker serve` on ephemeral ports, optionally under RLIMIT_AS = `limit_bytes`."""

    def __init__(self, limit_bytes=None):
        def limit_address_space():
            if limit_bytes is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([MOCKER_BIN, "serve", *ENDPOINT_FLAGS, *SERVE_FLAGS],
                                     stdout=subprocess.PIPE, stderr=self.stderr,
                                     preexec_fn=limit_address_space)
        deadline = time.monotonic() + 10.0
        buf = b""
        while b"ready\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError("mocker serve did not print `ready`: " + self.stderr_text())
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                buf += os.read(self.proc.stdout.fileno(), 4096)
        self.endpoints = dict(line.split(" ", 1) for line in
                              buf.decode().split("ready\n")[0].splitlines())

    def client(self, routing_id):
        return MockerClient.connect(self.endpoints["submit"], self.endpoints["cancel"],
                                    routing_id=routing_id)

    def alive(self):
        return self.proc.poll() is None

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        """SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(WAIT_S)
        finally:
            self.kill()
            self.proc.stdout.close()
            self.stderr.close()


def big_submit_template():
    """A submit of BIG_PROMPT tokens whose id is the 10 bytes b"##########": ids are spliced in.
    Token values 1..80 are one-byte msgpack ints, so the id pattern cannot occur in the prompt."""
    msg = {"v": 1, "type": "submit", "id": "#" * 10,
           "prompt": [1 + i % 80 for i in range(BIG_PROMPT)], "max_tokens": 1}
    return msgpack.packb(msg, use_bin_type=True)


class MemoryHostilityTest(unittest.TestCase):
    def test_queued_max_tokens_and_exhaustion_are_refused_cleanly(self):
        baseline = Serve()
        base_vm = vm_status(baseline.proc.pid)["VmSize"]
        baseline.kill()  # only measured; its exit is not under test
        baseline.proc.stdout.close()
        baseline.stderr.close()
        limit = int((base_vm + LIMIT_MARGIN_MIB) * 1024 * 1024)
        print("\nbaseline at ready: VmSize %.0f MiB; RLIMIT_AS %.0f MiB" % (base_vm, limit / 2**20))

        srv = Serve(limit)
        try:
            self.run_phases(srv)
        except BaseException:
            print("service stderr:\n" + srv.stderr_text())
            raise
        finally:
            if srv.alive():
                code = srv.stop()
                self.assertEqual(code, 0)

    def run_phases(self, srv):
        hostile = srv.client(b"hostile")
        pid = srv.proc.pid

        def replies(want, what):
            """Reads until `want(message)` returns True; every message goes through want."""
            deadline = time.monotonic() + WAIT_S
            while True:
                self.assertTrue(srv.alive(), "mocker serve died during %s: exit %s"
                                % (what, srv.proc.poll()))
                self.assertLess(time.monotonic(), deadline, "timed out during " + what)
                m = hostile.recv(timeout=0.05)
                if m is not None and want(m):
                    return

        # 1. 1,000 queued requests with max_tokens 1,000,000.
        for i in range(QUEUED):
            hostile.submit("q%d" % i, range(1, 17), QUEUED_MAX_TOKENS)
        acked = set()

        def phase1(m):
            if m["type"] == "error" or m["type"] == "submit_reject":
                self.fail("queued request refused: %r" % m)
            if m["type"] == "submit_ack":
                acked.add(m["id"])
            return len(acked) == QUEUED
        replies(phase1, "the 1,000 queued submits")
        print("1,000 queued (max_tokens 1,000,000): " + figures(pid))

        # 2. 1,000,000-token prompts until the limit is reached; at most 2 in flight.
        template = big_submit_template()
        accepted, refused, sent, in_flight = [], [], 0, set()
        first_refusal = None

        def phase2(m):
            nonlocal first_refusal
            if m["type"] == "submit_ack" and m["id"] in in_flight:
                in_flight.discard(m["id"])
                accepted.append(m["id"])
                return True
            if m["type"] == "error" and m.get("id") in in_flight:
                self.assertEqual(m["code"], "resource_exhausted", m)
                self.assertIn("out of memory", m["message"])
                in_flight.discard(m["id"])
                refused.append(m["id"])
                if first_refusal is None:
                    first_refusal = "after %d accepted big prompts: %s" % (len(accepted),
                                                                          figures(pid))
                return True
            self.assertNotIn(m["type"], ("error", "submit_reject"), m)
            return False

        while len(refused) < REFUSALS_WANTED:
            self.assertLess(sent, MAX_BIG, "the address-space limit was never reached")
            while len(in_flight) < 2 and sent < MAX_BIG:
                rid = "b%09d" % sent
                hostile.send_raw(template.replace(b"#" * 10, rid.encode()))
                in_flight.add(rid)
                sent += 1
            replies(phase2, "the big prompts")
        while in_flight:
            replies(phase2, "the last big prompts")
        self.assertGreater(len(accepted), 0)
        print("first refusal " + first_refusal)
        print("%d big prompts accepted, %d refused with resource_exhausted; %s"
              % (len(accepted), len(refused), figures(pid)))

        # 3. The hostile client cancels everything; another client is served normally.
        ids = ["q%d" % i for i in range(QUEUED)] + accepted
        for rid in ids:
            hostile.cancel(rid, wait=False)
        cancelled = set()

        def phase3(m):
            if m["type"] == "cancel_reply":
                cancelled.add(m["id"])
            return len(cancelled) == len(ids)
        replies(phase3, "the cancels")
        hostile.close()

        with srv.client(b"normal") as normal:
            normal.submit("n1", range(1, 9), 4)
            tokens, finish = [], None
            deadline = time.monotonic() + WAIT_S
            while finish is None:
                self.assertTrue(srv.alive(), "mocker serve died serving the normal client")
                self.assertLess(time.monotonic(), deadline, "the normal client was not served")
                m = normal.recv(timeout=0.05)
                if m is None:
                    continue
                self.assertNotIn(m["type"], ("error", "submit_reject"), m)
                if m["type"] == "output":
                    for o in m["outputs"]:
                        tokens += o["tokens"]
                        finish = o.get("finish", finish)
            self.assertEqual(finish, "length")
            self.assertEqual(len(tokens), 4)
        print("normal client served after the flood: " + figures(pid))


if __name__ == "__main__":
    if not MOCKER_BIN:
        sys.exit("set MOCKER_BIN to the mocker binary")
    unittest.main(verbosity=2)
