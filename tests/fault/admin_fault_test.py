#!/usr/bin/python3
"""The fault admin interface (service/README.md "Failure drills", "Admin interface") against a
real `mocker serve` child process, with a real HTTP client (http.client) and real client sockets.

* Off by default: /admin/faults is 404 saying how to turn it on.
* One worker: GET lists the start-up fault; POST arms `error:match=victim*` (201, its id), the
  next matching request is refused with the injected error while others stream, GET counts it
  fired; DELETE disarms it and the next matching request streams; the fault log line of the
  run-time fault says the pass it was armed at.
* A fleet of two: a POST without `worker=` is refused (400 naming both ways to say it);
  `crash:after_passes=3:worker=1` crashes worker 1 three passes after the pass it was armed at
  (fault log: "after P+3 passes, armed at pass P") while worker 0 keeps serving; a POST to the
  crashed worker is 503; `?workers=all` arms on every running worker.
* Hostile requests: unknown kind, bad key, empty body, oversized body, bad id, unknown id, bad
  method, unknown path, unknown query, raw garbage on the socket — each a 4xx naming what is
  wrong; the service keeps serving. Concurrent POST/DELETE from four threads while a stream runs.
* A bearer key: 401 (with WWW-Authenticate) without it or with a wrong one, 200 with it; a
  non-loopback HTTP endpoint with admin on and no key refuses to start, naming the key.

Waits are polls with deadlines. Needs MOCKER_BIN.
"""

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import (EPHEMERAL, WAIT_S, Serve, mocker_bin, paced,  # noqa: E402
                           poll_until)
from mocker_client import MockerClient, ServerError  # noqa: E402

KEY = "k3y-for-the-admin-api-0123456789"


def request(url, method, path, body=None, headers=None):
    """One HTTP request on a fresh connection: (status, parsed JSON body, headers)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=WAIT_S)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read().decode()
        return r.status, json.loads(data), dict(r.getheaders())
    finally:
        conn.close()


def raw_request(url, data):
    """Sends `data` as is on a new connection; the answer's (status, parsed JSON body)."""
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=WAIT_S) as s:
        s.sendall(data)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = s.recv(4096)
            if not chunk:
                raise AssertionError("connection closed without an answer: %r" % reply)
            reply += chunk
        head, body = reply.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(body) < length:
            chunk = s.recv(4096)
            if not chunk:
                break
            body += chunk
        return int(head.split(b" ")[1]), json.loads(body.decode())


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class AdminTest(unittest.TestCase):
    def serve(self, *flags):
        serve = Serve(*flags)
        self.addCleanup(serve.close)
        return serve, serve.endpoints["http"]

    def fault_log(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        return os.path.join(d.name, "faults.jsonl")

    def test_off_by_default(self):
        _, url = self.serve(*paced(1, 1))
        status, body, _ = request(url, "GET", "/admin/faults")
        self.assertEqual(status, 404)
        self.assertIn("--faults-admin", body["error"])
        status, _, _ = request(url, "POST", "/admin/faults", body="crash")
        self.assertEqual(status, 404)

    def test_arm_list_disarm(self):
        log = self.fault_log()
        serve, url = self.serve(*paced(1, 1), "--faults-admin", "--fault-log", log,
                                "--fault", "fpm_stop:after_passes=1000000")
        status, body, _ = request(url, "GET", "/admin/faults")
        self.assertEqual(status, 200)
        self.assertEqual([(f["id"], f["kind"], f["source"]) for f in body["faults"]],
                         [(0, "fpm_stop", "config")])
        self.assertEqual(body["faults"][0]["trigger"], "after_passes=1000000")
        with serve.client() as c:
            c.submit("warm", prompt=[1, 2, 3, 4], max_tokens=5)
            self.assertEqual(len(list(c.stream("warm", timeout=WAIT_S))), 5)
        status, armed, _ = request(url, "POST", "/admin/faults",
                                   body="error:match=victim*:code=unsupported\n")
        self.assertEqual(status, 201, armed)
        self.assertEqual(armed["id"], 1)
        self.assertEqual(armed["spec"], "error:match=victim*:code=unsupported")
        at_pass = armed["workers"][0]["armed_at_pass"]
        self.assertGreaterEqual(at_pass, 5)  # the warm-up's passes ran before
        with serve.client() as c:
            c.submit("victim1", prompt=[1, 2, 3, 4], max_tokens=5)
            c.submit("other", prompt=[1, 2, 3, 4], max_tokens=5)
            self.assertEqual(len(list(c.stream("other", timeout=WAIT_S))), 5)
            with self.assertRaises(ServerError) as refused:
                list(c.stream("victim1", timeout=WAIT_S))
            self.assertEqual(refused.exception.message["code"], "unsupported")
            self.assertIn("fault 1", refused.exception.message["message"])
        status, body, _ = request(url, "GET", "/admin/faults")
        listed = {f["id"]: f for f in body["faults"]}
        self.assertEqual(listed[1]["fired"], 1)
        self.assertEqual(listed[1]["source"], "admin")
        self.assertEqual(listed[1]["trigger"], "match=victim*")
        self.assertEqual(listed[1]["scope"], {"worker": "all", "rank": "all"})
        self.assertEqual(listed[1]["workers"],
                         [{"worker": 0, "running": True, "armed_at_pass": at_pass, "fired": 1}])
        status, body, _ = request(url, "DELETE", "/admin/faults/1")
        self.assertEqual((status, body), (200, {"id": 1, "disarmed_on": [0]}))
        with serve.client() as c:
            c.submit("victim2", prompt=[1, 2, 3, 4], max_tokens=5)
            self.assertEqual(len(list(c.stream("victim2", timeout=WAIT_S))), 5)
        status, body, _ = request(url, "GET", "/admin/faults")
        self.assertEqual([f["id"] for f in body["faults"]], [0])
        status, _, _ = request(url, "DELETE", "/admin/faults/1")
        self.assertEqual(status, 404)
        lines = read_log(log)
        self.assertEqual(len(lines), 1, lines)
        self.assertEqual(lines[0]["fault"], 1)
        self.assertEqual(lines[0]["request"], "victim1")
        self.assertEqual(lines[0]["detail"], "code unsupported, armed at pass %d" % at_pass)
        print("[admin] error fault armed at pass %d, fired once, disarmed" % at_pass)

    def test_fleet_scope_and_crash(self):
        log = self.fault_log()
        serve, url = self.serve(*paced(1, 1), "--num-workers", "2", "--faults-admin",
                                "--fault-log", log)
        status, body, _ = request(url, "POST", "/admin/faults", body="slow:factor=2")
        self.assertEqual(status, 400)
        self.assertIn("worker=I", body["error"])
        self.assertIn("workers=all", body["error"])
        status, body, _ = request(url, "POST", "/admin/faults?workers=all",
                                  body="slow:factor=2:worker=1")
        self.assertEqual(status, 400)
        self.assertIn("not both", body["error"])
        status, body, _ = request(url, "POST", "/admin/faults", body="slow:factor=2:worker=2")
        self.assertEqual(status, 400)
        self.assertIn("worker 2 does not exist", body["error"])
        status, armed, _ = request(url, "POST", "/admin/faults",
                                   body="crash:after_passes=3:worker=1")
        self.assertEqual(status, 201, armed)
        self.assertEqual([w["worker"] for w in armed["workers"]], [1])
        at_pass = armed["workers"][0]["armed_at_pass"]
        self.assertEqual(at_pass, 0)
        # Worker 1 crashes at its 4th pass: a 20-token stream gets at most 3 tokens, no finish.
        with MockerClient.connect(serve.endpoints["worker[1].submit"],
                                  serve.endpoints["worker[1].cancel"]) as c:
            c.submit("doomed", prompt=[1, 2, 3, 4], max_tokens=20)
            tokens = []
            with self.assertRaises(TimeoutError):  # no terminal: the worker is gone
                for t in c.stream("doomed", timeout=2.0):
                    tokens.append(t)
            self.assertLessEqual(len(tokens), 3)
        poll_until(lambda: any(line["kind"] == "crash" for line in read_log(log)),
                   "the crash in the fault log")
        crash = [line for line in read_log(log) if line["kind"] == "crash"][0]
        self.assertEqual((crash["worker"], crash["fault"]), (1, 0))
        self.assertEqual(crash["detail"],
                         "after %d passes, armed at pass %d" % (at_pass + 3, at_pass))
        # Worker 0 serves on; worker 1 takes no more faults.
        with serve.client() as c:
            c.submit("alive", prompt=[1, 2, 3, 4], max_tokens=5)
            self.assertEqual(len(list(c.stream("alive", timeout=WAIT_S))), 5)
        poll_until(lambda: request(url, "POST", "/admin/faults", body="slow:factor=2:worker=1")[0]
                   == 503, "a POST to the crashed worker refused")
        status, body, _ = request(url, "POST", "/admin/faults?workers=all", body="slow:factor=2")
        self.assertEqual(status, 503)
        self.assertEqual([w["worker"] for w in body["workers"]], [0])
        self.assertIn("worker(s) 1", body["error"])
        status, listing, _ = request(url, "GET", "/admin/faults")
        crash_entry = [f for f in listing["faults"] if f["kind"] == "crash"][0]
        self.assertEqual(crash_entry["workers"][0]["running"], False)
        self.assertEqual(crash_entry["fired"], 1)
        status, body, _ = request(url, "DELETE", "/admin/faults/%d" % body["id"])
        self.assertEqual((status, body["disarmed_on"]), (200, [0]))
        print("[admin] fleet: crash armed on worker 1 at pass %d fired after %d passes"
              % (at_pass, at_pass + 3))

    def test_hostile_requests(self):
        serve, url = self.serve(*paced(1, 1), "--faults-admin")
        cases = [
            ("POST", "/admin/faults", "explode", 400, "unknown kind 'explode'"),
            ("POST", "/admin/faults", "slow:factor=0.5", 400, "factor must be > 1"),
            ("POST", "/admin/faults", "slow:colour=red", 400, "'colour' is not a key"),
            ("POST", "/admin/faults", "", 400, "empty body"),
            ("POST", "/admin/faults", "crash:rank=9", 400, "rank 9 does not exist"),
            ("POST", "/admin/faults", "x" * 5000, 413, "body over 4096 bytes"),
            ("POST", "/admin/faults?color=red", "crash", 400, "unknown query"),
            ("GET", "/admin/faults?x=1", None, 400, "takes no query"),
            ("DELETE", "/admin/faults/abc", None, 400, "unsigned integer"),
            ("DELETE", "/admin/faults/99999999999999", None, 400, "unsigned integer"),
            ("DELETE", "/admin/faults/7", None, 404, "no fault 7"),
            ("PUT", "/admin/faults", "crash", 405, "not allowed"),
            ("GET", "/admin/faults/0", None, 405, "not allowed"),
            ("GET", "/admin/secrets", None, 404, "no admin path"),
            ("POST", "/admin/faults", "crash:\x00\xff", 400, "byte 0x00 at offset 6"),
            ("POST", "/admin/faults", "crash:\xffx=1", 400, "byte 0xff at offset 6"),
        ]
        for method, path, body, want, words in cases:
            status, reply, headers = request(url, method, path,
                                             body=None if body is None else body.encode("latin-1"))
            self.assertEqual(status, want, (method, path, reply))
            self.assertIn(words, reply["error"], (method, path))
            if want == 405:
                self.assertIn("Allow", headers)
        # Raw garbage, a huge announced body, an unknown method, a raw byte in the path: each
        # answered (status, words), the body valid UTF-8 JSON.
        for junk, want, words in (
                (b"\x00\x01garbage\r\n\r\n", 400, "malformed request"),
                (b"POST /admin/faults HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413,
                 "body over 4096 bytes"),
                (b"BREW /admin/faults HTTP/1.1\r\n\r\n", 400, "method this server does not know"),
                (b"DELETE /admin/faults/\xff HTTP/1.1\r\n\r\n", 400, "got '?'")):
            status, body = raw_request(url, junk)
            self.assertEqual(status, want, junk)
            self.assertIn(words, body["error"], junk)
        # Concurrent arms and disarms while a stream runs: every one answered, nothing left.
        errors = []

        def churn(n):
            try:
                for i in range(15):
                    st, b, _ = request(url, "POST", "/admin/faults",
                                       body="abort:tokens=1:match=t%d-%d" % (n, i))
                    if st != 201:
                        errors.append((st, b))
                        continue
                    st, b, _ = request(url, "DELETE", "/admin/faults/%d" % b["id"])
                    if st != 200:
                        errors.append((st, b))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        with serve.client() as c:
            c.submit("during", prompt=[1, 2, 3, 4], max_tokens=200)
            threads = [threading.Thread(target=churn, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(len(list(c.stream("during", timeout=WAIT_S))), 200)
        self.assertEqual(errors, [])
        status, body, _ = request(url, "GET", "/admin/faults")
        self.assertEqual((status, body), (200, {"faults": []}))
        self.assertEqual(request(url, "GET", "/health")[0], 200)

    def test_bearer_key(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        key_file = os.path.join(d.name, "admin.key")
        with open(key_file, "w") as f:
            f.write(KEY + "\n")
        _, url = self.serve(*paced(1, 1), "--faults-admin", "--faults-admin-key-file", key_file)
        status, body, headers = request(url, "GET", "/admin/faults")
        self.assertEqual(status, 401)
        self.assertEqual(headers.get("WWW-Authenticate"), "Bearer")
        self.assertIn("Authorization: Bearer", body["error"])
        for wrong in ("Bearer " + KEY[:-1], "Bearer " + KEY + "x", "Basic " + KEY, KEY):
            status, _, _ = request(url, "POST", "/admin/faults", body="crash",
                                   headers={"Authorization": wrong})
            self.assertEqual(status, 401, wrong)
        status, body, _ = request(url, "GET", "/admin/faults",
                                  headers={"Authorization": "Bearer " + KEY})
        self.assertEqual((status, body), (200, {"faults": []}))

    def test_non_loopback_needs_a_key(self):
        flags = []
        for name in ("submit", "cancel", "kv-events", "kv-replay", "fpm"):
            flags += ["--%s-endpoint" % name, EPHEMERAL]
        r = subprocess.run([mocker_bin(), "serve", *flags, "--http-endpoint", "0.0.0.0:0",
                            "--faults-admin"], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=WAIT_S)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"faults.admin_key_file", r.stderr)
        self.assertIn(b"non-loopback", r.stderr)


if __name__ == "__main__":
    unittest.main()
