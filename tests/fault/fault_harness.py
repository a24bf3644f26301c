"""Shared pieces of the process-level fault suite (tests/fault/README.md).

`Serve` runs a real `mocker serve` child process on loopback endpoints (ephemeral ports unless
given) and reads the bound endpoints back from its stdout; `ClientProcess` runs
`stream_client.py` as a child process; the rest are small helpers: deadline polling, stats
queries, /proc/PID/status figures, percentiles. Nothing here sleeps to wait for an event: every
wait is a poll or a select with a deadline.
"""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))

from mocker_client import MockerClient  # noqa: E402

PYTHON = "/usr/bin/python3"
# Children get SIGKILL when the test process dies (a ctest timeout, a crash), so no paced
# `mocker serve` outlives its test. setpriv (util-linux) sets the flag, then execs: same PID.
ORPHAN_GUARD = ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--"] \
    if os.access("/usr/bin/setpriv", os.X_OK) else []
STREAM_CLIENT = os.path.join(HERE, "stream_client.py")
STARTUP_TIMEOUT_S = 20.0
WAIT_S = 20.0  # bound of any single wait; generous for a loaded 2-core machine
EPHEMERAL = "tcp://127.0.0.1:*"
ENDPOINT_NAMES = ("submit", "cancel", "kv-events", "kv-replay", "fpm")
# Real pacing with fixed pass times: a request with a large max_tokens stays in flight until it
# is cancelled, abandoned or shut down.
LONG = 10_000_000


def mocker_bin():
    path = os.environ.get("MOCKER_BIN")
    if not path or not os.access(path, os.X_OK):
        sys.exit("fault tests: set MOCKER_BIN to the mocker binary (got %r)" % path)
    return path


def paced(prefill_ms, decode_ms):
    """Flags for real-time pacing with fixed pass durations."""
    return ["--speedup-ratio", "1", "--timing-model", "fixed", "--fixed-prefill-ms",
            str(prefill_ms), "--fixed-decode-ms", str(decode_ms)]


class Serve:
    """A `mocker serve` child process. `endpoints` maps the printed names ("submit",
    "kv_events[0]", ...) to the bound endpoints; `ports` maps the flag names to the port numbers.
    """

    def __init__(self, *flags, endpoints=None):
        endpoints = endpoints or {}
        self.endpoint_flags = []
        for name in ENDPOINT_NAMES:
            self.endpoint_flags += ["--%s-endpoint" % name, endpoints.get(name, EPHEMERAL)]
        self.endpoint_flags += ["--http-endpoint", "127.0.0.1:0"]  # HTTP: ephemeral port
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*ORPHAN_GUARD, mocker_bin(), "serve", *self.endpoint_flags,
                                      *flags],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.stderr)
        self.endpoints = {}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise AssertionError("mocker serve printed no `ready` within %s s: %s"
                                     % (STARTUP_TIMEOUT_S, self.stderr_text()))
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.proc.wait()
                raise AssertionError("mocker serve exited (%s) before `ready`: %s"
                                     % (self.proc.returncode, self.stderr_text()))
            buf += chunk
            lines = buf.split(b"\n")
            if b"ready" in lines[:-1]:
                break
        for line in lines[:lines.index(b"ready")]:
            name, endpoint = line.decode().split(" ", 1)
            self.endpoints[name] = endpoint
        # A fleet (--num-workers > 1) prints "worker[i].submit": worker 0's are the defaults.
        self.submit = self.endpoints.get("submit", self.endpoints.get("worker[0].submit"))
        self.cancel = self.endpoints.get("cancel", self.endpoints.get("worker[0].cancel"))
        self.pid = self.proc.pid

    def endpoint_by_flag(self):
        """The bound endpoints keyed by flag name (kv-events etc.), to start a successor on the
        same ports."""
        printed = {"submit": "submit", "cancel": "cancel", "kv-events": "kv_events[0]",
                   "kv-replay": "kv_replay[0]", "fpm": "fpm[0]"}
        return {flag: self.endpoints[name] for flag, name in printed.items()
                if name in self.endpoints}

    def client(self, routing_id=None, **kwargs):
        return MockerClient.connect(self.submit, self.cancel, routing_id=routing_id, **kwargs)

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def terminate(self, timeout=WAIT_S):
        """SIGTERM; returns the exit code (kills and fails when it does not exit in time)."""
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
        """Stops the process if it still runs (SIGTERM, must exit 0) and releases its pipes."""
        try:
            if self.proc.poll() is None:
                code = self.terminate()
                assert code == 0, "mocker serve exited with %s: %s" % (code, self.stderr_text())
        finally:
            self.kill()
            self.proc.stdout.close()
            self.stderr.close()


class ClientProcess:
    """`stream_client.py` as a child process: it submits its requests, prints one JSON line per
    event (see that file) and, when its streams have ended, a final `summary` line."""

    def __init__(self, serve, routing_id, *args, stdin_pipe=False):
        self.routing_id = routing_id
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [*ORPHAN_GUARD, PYTHON, STREAM_CLIENT, "--submit", serve.submit, "--cancel",
             serve.cancel,
             "--routing-id", routing_id, *args],
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.stderr)
        self._buf = b""
        self.events = []

    def _read_lines(self, timeout):
        """Reads whatever stdout has within `timeout`; returns the new JSON events."""
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
        if not ready:
            return []
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return None  # EOF
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        new = [json.loads(line) for line in lines if line]
        self.events += new
        return new

    def wait_event(self, kind, timeout=WAIT_S):
        """Waits for the first event of `kind` (already received ones count); returns it."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e["event"] == kind:
                    return e
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("client %s: no %r event within %s s (stderr: %s)"
                                     % (self.routing_id, kind, timeout, self.stderr_text()))
            if self._read_lines(left) is None:
                raise AssertionError("client %s exited (%s) before a %r event: %s"
                                     % (self.routing_id, self.proc.wait(), kind,
                                        self.stderr_text()))

    def summary(self, timeout=WAIT_S):
        """Waits for the final summary and the exit (code 0); returns the summary."""
        s = self.wait_event("summary", timeout)
        code = self.proc.wait(timeout)
        assert code == 0, "client %s exited %s: %s" % (self.routing_id, code, self.stderr_text())
        return s

    def close_stdin(self):
        """Ends the child's stdin: a --waves-until-eof client finishes its current wave."""
        self.proc.stdin.close()

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def kill(self):
        """SIGKILL (no clean-up of any kind in the child) and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self):
        self.kill()
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.stdout.close()
        self.stderr.close()


def poll_until(predicate, what, timeout=WAIT_S, interval=0.005):
    """Calls predicate() until it returns a true value (returned); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))
        time.sleep(interval)  # the poll interval, not a wait for an event


def proc_status_kib(pid, key):
    """A `kB` figure of /proc/PID/status (VmRSS, VmHWM, ...)."""
    with open("/proc/%d/status" % pid, encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("/proc/%d/status has no %s" % (pid, key))


def percentile(values, q):
    """The q-quantile (0..1) by nearest rank of a non-empty list."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]
