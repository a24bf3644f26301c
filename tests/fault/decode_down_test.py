#!/usr/bin/python3
"""A crashed decode server under a disaggregated live replay, with real processes
(tools/replay/README.md "Workers that fail"; docs/failure-drills.md).

One `mocker serve --worker-type prefill` and two `--worker-type decode` servers (paced: 2 ms
prefill, 5 ms decode passes); decode server 1 crashes after 20 passes (`--fault
crash:after_passes=20`: sockets closed, exit code 70) while it streams several requests.
`mocker replay` drives them with 40 requests of 40 output tokens, one every 10 ms, the decode
hop round robin. The replay must see decode server 1's closed connection, declare it down after
`--worker-down-after-ms` and hand every later request to decode server 0:
  * with `--migration-limit 3`, the requests it held are migrated (re-sent through the prefill
    server with the tokens they had streamed as the prompt) and every request completes with
    all its 40 tokens;
  * without (0), the requests it held end failed at the down declaration.
Either way none waits for its request timeout, and every request that arrived after the
declaration completes without a migration. With a single decode server that crashes, the
requests handed off after its declaration fail at once (no decode server up).

Waits are polls with deadlines (the replay itself is bounded by its request timeout). Needs
MOCKER_BIN.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import EPHEMERAL, WAIT_S, Serve, mocker_bin, paced, poll_until  # noqa: E402

REQUESTS = 40
GAP_MS = 10
OUTPUT = 40  # tokens per request: about 200 ms of 5 ms decode passes
DOWN_AFTER_MS = 100
CRASH_EXIT_CODE = 70
LIMIT = 3


def write_trace(path):
    with open(path, "w") as f:
        for i in range(REQUESTS):
            # One 64-token block each, all different: no prefix is shared.
            f.write(json.dumps({"timestamp": i * GAP_MS, "input_length": 64,
                                "output_length": OUTPUT, "hash_ids": [1000 + i]}) + "\n")


class DecodeDownTest(unittest.TestCase):
    def replay(self, decode_faults, *flags):
        """One prefill server and a decode server per entry of `decode_faults` (its --fault spec
        or None), the trace replayed live against them with `flags`: (the replay's completed
        process, its --requests-jsonl and --report-json paths, the decode servers)."""
        work = tempfile.mkdtemp(prefix="mocker-decode-down-")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        trace = os.path.join(work, "trace.jsonl")
        write_trace(trace)
        prefill = Serve("--worker-type", "prefill", "--handoff-endpoint", EPHEMERAL,
                        *paced(2, 5))
        self.addCleanup(prefill.close)
        decode = []
        for fault in decode_faults:
            fault_flags = ["--fault", fault] if fault else []
            decode.append(Serve("--worker-type", "decode", *paced(2, 5), *fault_flags))
            self.addCleanup(decode[-1].close)
        requests = os.path.join(work, "requests.jsonl")
        report = os.path.join(work, "report.json")
        cmd = [mocker_bin(), "replay", trace, "--trace-block-size", "64",
               "--worker-down-after-ms", str(DOWN_AFTER_MS), "--request-timeout-s", "20",
               "--no-progress", "--requests-jsonl", requests, "--report-json", report, *flags,
               "--connect-prefill", prefill.submit, "--connect-cancel", prefill.cancel]
        for d in decode:
            cmd += ["--connect-decode", d.submit, "--connect-decode-cancel", d.cancel]
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        print(out.stdout[out.stdout.find("Live"):], out.stderr)
        return out, requests, report, decode

    def run_drill(self, migration):
        out, requests, report, decode = self.replay(
            [None, "crash:after_passes=20"], "--decode-router", "round_robin",
            *(["--migration-limit", str(LIMIT)] if migration else []))
        poll_until(lambda: decode[1].proc.poll() is not None, "the crashed decode server's exit",
                   WAIT_S)
        self.assertEqual(decode[1].proc.returncode, CRASH_EXIT_CODE)

        # The report: decode server 1 suspect (connection closed), down DOWN_AFTER_MS later.
        suspect = re.search(r"  ([0-9.]+) ms: decode server 1 suspect \(connection closed\)",
                            out.stdout)
        self.assertIsNotNone(suspect, out.stdout)
        down = re.search(r"  ([0-9.]+) ms: decode server 1 down \(suspect too long; first "
                         r"failure at ([0-9.]+) ms, detected in ([0-9.]+) ms\)", out.stdout)
        self.assertIsNotNone(down, out.stdout)
        down_ms, first_ms, detected_ms = (float(down.group(k)) for k in (1, 2, 3))
        self.assertAlmostEqual(first_ms, float(suspect.group(1)), delta=0.05)
        self.assertGreaterEqual(detected_ms, DOWN_AFTER_MS - 0.05)
        # Nothing else went down: not the prefill server, not decode server 0.
        self.assertEqual(len(re.findall(r"ms: (?:decode )?server \d down", out.stdout)), 1,
                         out.stdout)
        self.assertIn("1 declared down", out.stdout)

        with open(requests) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), REQUESTS)
        statuses = [r["terminal_status"] for r in rows]
        self.assertEqual(statuses.count("cancelled"), 0, out.stdout)  # none waited its timeout
        self.assertEqual(statuses.count("rejected"), 0, out.stderr)
        # Every request that arrived after the declaration went to decode server 0 and
        # completed there, without a migration.
        after = [r for r in rows if r["arrival_time_ms"] > down_ms]
        self.assertGreaterEqual(len(after), REQUESTS // 6, "the fault came too late to test "
                                "routing")
        for r in after:
            self.assertEqual((r["terminal_status"], r["migrations"]), ("completed", 0))
        handed = re.search(r"handoffs per decode server \(round_robin\): (\d+) (\d+)", out.stdout)
        self.assertIsNotNone(handed, out.stdout)
        # Decode server 1 got only handoffs from before the declaration.
        self.assertLessEqual(int(handed.group(2)), REQUESTS - len(after))
        failed = [r for r in rows if r["terminal_status"] == "failed"]
        with open(report) as f:
            summary = json.load(f)
        migrated = [r for r in rows if r["migrations"] > 0]
        self.assertEqual(summary.get("migrated_requests", 0), len(migrated))
        if not migration:
            # What decode server 1 held failed at the down declaration, and nothing else failed.
            self.assertGreaterEqual(len(failed), 1, out.stdout)
            self.assertEqual(migrated, [])
            for r in failed:
                self.assertAlmostEqual(r["terminal_time_ms"], down_ms, delta=0.05)
            held = int(re.search(r"(\d+) requests? failed with a worker that went down",
                                 out.stdout).group(1))
            self.assertEqual(held, len(failed))
            self.assertEqual(statuses.count("completed"), REQUESTS - len(failed))
            return
        # Every request completed with all its tokens; the migrated ones after the down time,
        # their latency with the detour (detection, a new prefill, a new handoff).
        self.assertEqual(failed, [], out.stdout)
        self.assertEqual(statuses, ["completed"] * REQUESTS, out.stdout)
        self.assertTrue(all(r["output_length"] == OUTPUT for r in rows))
        self.assertGreaterEqual(len(migrated), 1, out.stdout)
        self.assertTrue(all(r["migrations"] == 1 for r in migrated))
        for r in migrated:
            self.assertGreater(r["terminal_time_ms"], down_ms)
            self.assertGreater(r["e2e_latency_ms"], down_ms - r["arrival_time_ms"])
        line = re.search(r"1 declared down; (\d+) requests? migrated to another server \((\d+) "
                         r"migrations, limit %d per request\), 0 requests failed with a worker "
                         r"that went down" % LIMIT, out.stdout)
        self.assertIsNotNone(line, out.stdout)
        self.assertEqual(int(line.group(1)), len(migrated))
        # Mid-stream: the crash caught requests that had streamed tokens from decode server 1.
        self.assertGreaterEqual(len([r for r in migrated if r["first_token_ms"] < down_ms]), 1)

    def test_no_decode_server_left(self):
        """The only decode server crashes: once it is down, a handoff has nowhere to go and the
        request fails at once (the prefill server's KV released), counted in the report; none
        waits for its timeout."""
        out, requests, _, _ = self.replay(["crash:after_passes=20"],
                                          "--migration-limit", str(LIMIT))
        down = re.search(r"  ([0-9.]+) ms: decode server 0 down \(suspect too long;", out.stdout)
        self.assertIsNotNone(down, out.stdout)
        down_ms = float(down.group(1))
        none_up = re.search(r"(\d+) failed at their handoff with no decode server up",
                            out.stdout)
        self.assertIsNotNone(none_up, out.stdout)
        self.assertIn("every decode server was down", out.stderr)
        with open(requests) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), REQUESTS)
        statuses = [r["terminal_status"] for r in rows]
        self.assertEqual(statuses.count("cancelled"), 0, out.stdout)  # none waited its timeout
        after = [r for r in rows if r["arrival_time_ms"] > down_ms]
        self.assertGreaterEqual(len(after), REQUESTS // 6, "the fault came too late")
        self.assertTrue(all(r["terminal_status"] == "failed" for r in after))
        # Each of them failed at its handoff: no decode server was up.
        self.assertGreaterEqual(int(none_up.group(1)), len(after))

    def test_migrated(self):
        self.run_drill(migration=True)

    def test_failed_without_migration(self):
        self.run_drill(migration=False)


if __name__ == "__main__":
    unittest.main()
