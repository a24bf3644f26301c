#!/usr/bin/env python3
"""A real Prometheus server scrapes a real `mocker serve`; the series are checked through
Prometheus's HTTP query API after a known workload, and /metrics is parsed with
python3-prometheus-client's text parser.

Both are child processes on loopback: `mocker serve` on ephemeral ports (its HTTP port read back
from its `http http://HOST:PORT` line), Prometheus (Debian `prometheus`) with a generated scrape
config (scrape_interval 1s) and its TSDB in a temporary directory, on a free loopback port. Every
wait polls with a deadline; both children are ended (SIGTERM, then SIGKILL) whatever happens.

Environment: MOCKER_BIN (the mocker binary), PROMETHEUS_BIN (default /usr/bin/prometheus).
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
from mocker_client import MockerClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

MOCKER_BIN = os.environ.get("MOCKER_BIN", "")
PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
EPHEMERAL = "tcp://127.0.0.1:*"
STARTUP_S = 30.0   # mocker ready; Prometheus up and its target scraped (slow on a loaded VM)
QUERY_S = 30.0     # a value to reach Prometheus after the workload (scrape interval 1 s)
# Known workload: request i has PROMPTS[i] prompt tokens and MAX_TOKENS[i] output tokens.
PROMPTS = [16, 24, 40, 8, 64]
MAX_TOKENS = [5, 9, 17, 1, 33]
MODEL = "scrape-test-model"
WORKER = "w0"


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def free_loopback_port():
    # Prometheus takes no port 0; an ephemeral port the kernel just handed out is free.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PrometheusScrapeTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(MOCKER_BIN, "MOCKER_BIN is not set")
        self.tmp = tempfile.mkdtemp(prefix="mocker-prom-")
        self.children = []
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.addCleanup(self.stop_children)

    def stop_children(self):
        for proc in reversed(self.children):
            stop(proc)

    def start_mocker(self):
        flags = []
        for name in ("submit", "cancel", "kv-events", "kv-replay", "fpm"):
            flags += ["--%s-endpoint" % name, EPHEMERAL]
        flags += ["--http-endpoint", "127.0.0.1:0", "--served-model-name", MODEL,
                  "--worker-label", WORKER,
                  "--num-gpu-blocks", "512", "--block-size", "16", "--speedup-ratio", "1",
                  "--timing-model", "fixed", "--fixed-prefill-ms", "2", "--fixed-decode-ms", "2"]
        self.mocker_err = open(os.path.join(self.tmp, "mocker.err"), "wb")
        proc = subprocess.Popen([MOCKER_BIN, "serve", *flags], stdout=subprocess.PIPE,
                                stderr=self.mocker_err)
        self.children.append(proc)
        endpoints, buf = {}, b""
        deadline = time.monotonic() + STARTUP_S
        while b"ready\n" not in buf:
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, "mocker serve printed no `ready`")
            self.assertIsNone(proc.poll(), "mocker serve exited before `ready`")
            readable, _, _ = select.select([proc.stdout], [], [], left)
            if readable:
                buf += os.read(proc.stdout.fileno(), 4096)
        for line in buf.decode().splitlines():
            if " " in line:
                name, value = line.split(" ", 1)
                endpoints[name] = value
        self.assertIn("http", endpoints)
        return endpoints

    def start_prometheus(self, target):
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: mocker\n    static_configs:\n"
                    "      - targets: ['%s']\n" % target)
        port = free_loopback_port()
        self.prom_err = open(os.path.join(self.tmp, "prometheus.err"), "wb")
        proc = subprocess.Popen(
            [PROMETHEUS_BIN, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(self.tmp, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=self.prom_err)
        self.children.append(proc)
        return proc, "http://127.0.0.1:%d" % port

    def api(self, prom, path, **params):
        status, body = http_get(prom + path + "?" + urllib.parse.urlencode(params))
        self.assertEqual(status, 200)
        reply = json.loads(body)
        self.assertEqual(reply["status"], "success", body)
        return reply["data"]

    def poll(self, what, fn, timeout, proc=None):
        """fn() until it returns something truthy; fails naming `what` at the deadline."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                self.fail("%s: process exited (%s): %s" % (what, proc.returncode, self.prom_log()))
            try:
                last = fn()
                if last:
                    return last
            except OSError as e:  # not listening yet
                last = e
            time.sleep(0.1)  # poll interval
        self.fail("%s: not within %s s (last: %r)" % (what, timeout, last))

    def prom_log(self):
        self.prom_err.flush()
        with open(self.prom_err.name, "rb") as f:
            return f.read().decode(errors="replace")[-2000:]

    def query(self, prom, expr):
        """{label-tuple: value} of an instant query."""
        data = self.api(prom, "/api/v1/query", query=expr)
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}

    def one(self, prom, expr):
        values = self.query(prom, expr)
        self.assertEqual(len(values), 1, "%s: %r" % (expr, values))
        return next(iter(values.values()))

    def test_prometheus_scrapes_the_workload(self):
        endpoints = self.start_mocker()
        target = endpoints["http"][len("http://"):]
        prom_proc, prom = self.start_prometheus(target)

        def target_up():
            data = self.api(prom, "/api/v1/targets")
            active = data["activeTargets"]
            return active and all(t["health"] == "up" for t in active) and active
        self.poll("Prometheus scraping mocker", target_up, STARTUP_S, prom_proc)

        # The known workload; count what the client receives.
        received = 0
        with MockerClient.connect(endpoints["submit"], endpoints["cancel"]) as client:
            for i, (p, m) in enumerate(zip(PROMPTS, MAX_TOKENS)):
                client.submit("r%d" % i, list(range(1000 * i, 1000 * i + p)), m)
            for i in range(len(PROMPTS)):
                received += len(list(client.stream("r%d" % i, timeout=20.0)))
        self.assertEqual(received, sum(MAX_TOKENS))

        sel = '{job="mocker",model_name="%s",worker="%s",engine="0"}' % (MODEL, WORKER)
        self.poll("generation tokens in Prometheus",
                  lambda: self.query(prom, "vllm:generation_tokens_total" + sel)
                  and self.one(prom, "vllm:generation_tokens_total" + sel) == received,
                  QUERY_S, prom_proc)
        # Every other series, as Prometheus stored it from the same or a later scrape.
        self.assertEqual(self.one(prom, "vllm:prompt_tokens_total" + sel), sum(PROMPTS))
        self.assertEqual(self.one(prom, 'vllm:request_success_total{job="mocker",'
                                        'finished_reason="length"}'), len(PROMPTS))
        self.assertEqual(self.one(prom, 'vllm:request_success_total{job="mocker",'
                                        'finished_reason="abort"}'), 0)
        for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                  "request_queue_time_seconds", "request_prefill_time_seconds",
                  "request_decode_time_seconds"):
            self.assertEqual(self.one(prom, "vllm:%s_count%s" % (h, sel)), len(PROMPTS), h)
        self.assertEqual(self.one(prom, "vllm:inter_token_latency_seconds_count" + sel),
                         received - len(PROMPTS))
        # Plausible latencies: 2 ms passes, a few requests; not a timing assertion.
        e2e_sum = self.one(prom, "vllm:e2e_request_latency_seconds_sum" + sel)
        self.assertGreater(e2e_sum, 0)
        self.assertLess(e2e_sum, 60)
        ttft_sum = self.one(prom, "vllm:time_to_first_token_seconds_sum" + sel)
        self.assertGreater(ttft_sum, 0)
        self.assertLessEqual(ttft_sum, e2e_sum)
        self.assertEqual(self.one(prom, "vllm:num_requests_running" + sel), 0)
        self.assertEqual(self.one(prom, "vllm:num_requests_waiting" + sel), 0)
        self.assertGreaterEqual(self.one(prom, "vllm:kv_cache_usage_perc" + sel), 0)
        self.assertGreaterEqual(self.one(prom, "vllm:prefix_cache_queries_total" + sel),
                                sum(PROMPTS) - 16)
        self.assertEqual(self.one(prom, 'up{job="mocker"}'), 1)
        # A bucket query over a histogram works as on vLLM's dashboards.
        self.assertTrue(self.query(prom, "histogram_quantile(0.9, rate(vllm:time_to_first_token"
                                         "_seconds_bucket[1m]))"))

        # The exposition itself, through the official client library's parser.
        status, text = http_get(endpoints["http"] + "/metrics")
        self.assertEqual(status, 200)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        self.assertEqual(families["vllm:generation_tokens"].type, "counter")
        self.assertEqual(families["vllm:num_requests_running"].type, "gauge")
        self.assertEqual(families["vllm:e2e_request_latency_seconds"].type, "histogram")
        gen = [s for s in families["vllm:generation_tokens"].samples
               if s.name == "vllm:generation_tokens_total"]
        self.assertEqual([(s.labels, s.value) for s in gen],
                         [({"model_name": MODEL, "worker": WORKER, "engine": "0"},
                           float(received))])
        ttft = families["vllm:time_to_first_token_seconds"].samples
        inf = [s for s in ttft if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
        self.assertEqual([s.value for s in inf], [float(len(PROMPTS))])
        les = [float(s.labels["le"]) for s in ttft if s.name.endswith("_bucket")]
        self.assertEqual(les, sorted(les))
        self.assertIn("mocker:passes", families)

        status, body = http_get(endpoints["http"] + "/ready")
        self.assertEqual((status, json.loads(body)["status"]), (200, "ok"))


if __name__ == "__main__":
    unittest.main()
