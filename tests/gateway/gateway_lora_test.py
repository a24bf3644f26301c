"""LoRA adapters through `mocker gateway` (gateway/README.md, "LoRA adapters"), with real HTTP
clients against a real `mocker serve --num-workers 2 --max-loras 2` fleet and `--router kv`:
`--lora-modules` in /v1/models, a request whose `model` names an adapter runs under it (its
prefix is cached and routed per adapter: no hit across adapters or with the base model), and
run-time load / unload with vLLM's bodies, answers and errors, an in-flight request finishing
after its adapter was unloaded; a load or unload reaches every worker (the client protocol's
lora_load / lora_unload, asked of the workers directly with the Python client), a worker's
refusal is vLLM's error; per-adapter metrics in a real scrape (prometheus_client's parser).

Nothing sleeps to wait for an event: every wait polls with a deadline.
"""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))

from fault_harness import WAIT_S, mocker_bin, paced, poll_until  # noqa: E402
from gateway_live_test import FleetServe, Gateway, sse_payloads  # noqa: E402
from mocker_client import LoraRefused, MockerClient, load_fleet  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def worker_clients(fleet_file):
    """A MockerClient per worker of the fleet file."""
    return [MockerClient.connect(w.submit, w.cancel) for w in load_fleet(fleet_file).workers]


def scrape(gw):
    """{(sample name, frozenset(labels)): value} of the gateway's /metrics, parsed."""
    status, _, body = gw.request("GET", "/metrics")
    assert status == 200, body
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


class LoraGatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fleet = FleetServe("--num-workers", "2", "--max-loras", "2", *paced(1, 1))
        try:
            cls.gw = Gateway([], "--fleet", cls.fleet.fleet_file, "--router", "kv", "--model",
                             "base", "--lora-modules", "sql=/adapters/sql-lora", "chat",
                             '{"name": "json", "path": "/adapters/json", '
                             '"base_model_name": "org/other-base"}',
                             "--allow-runtime-lora-updating")
        except BaseException:
            cls.fleet.close()
            raise
        with open(cls.fleet.fleet_file, encoding="utf-8") as f:
            cls.block = json.load(f)["block_size"]

    @classmethod
    def tearDownClass(cls):
        try:
            cls.gw.close()
        finally:
            cls.fleet.close()

    def complete(self, model, prompt, max_tokens=2):
        """(status, parsed body) of a non-streaming completion."""
        status, _, raw = self.gw.request("POST", "/v1/completions",
                                         {"model": model, "prompt": prompt,
                                          "max_tokens": max_tokens, "ignore_eos": True})
        return status, json.loads(raw)

    def models(self):
        status, _, raw = self.gw.request("GET", "/v1/models")
        self.assertEqual(status, 200, raw)
        return {m["id"]: m for m in json.loads(raw)["data"]}

    def test_models_list_the_base_model_then_each_adapter(self):
        models = self.models()
        self.assertEqual(list(models)[:4], ["base", "sql", "chat", "json"])
        self.assertEqual(models["base"]["parent"], None)
        self.assertEqual(models["base"]["root"], "base")
        self.assertEqual((models["sql"]["parent"], models["sql"]["root"]),
                         ("base", "/adapters/sql-lora"))
        self.assertEqual((models["chat"]["parent"], models["chat"]["root"]), ("base", "chat"))
        # vLLM's JSON form: its base_model_name is the parent.
        self.assertEqual((models["json"]["parent"], models["json"]["root"]),
                         ("org/other-base", "/adapters/json"))
        self.assertIsNone(models["sql"]["max_model_len"])

    def test_a_prefix_is_cached_and_routed_per_adapter(self):
        # 3 full blocks + 1 token; 2 output tokens complete no further block.
        prompt = [7000 + k for k in range(3 * self.block + 1)]
        routed_cached = self.gw.metric("dynamo_frontend_kv_routed_cached_prefix_total")
        blocks = self.gw.metric("dynamo_frontend_kv_index_blocks")
        for model in ("base", "sql", "chat"):
            status, body = self.complete(model, prompt)
            self.assertEqual(status, 200, body)
            self.assertEqual(body["model"], model)
            # Another adapter's (or the base model's) blocks are no hit on the worker.
            self.assertEqual(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0, model)
        # Each one stored its own 3 blocks (the adapter is in the block hash).
        poll_until(lambda: self.gw.metric("dynamo_frontend_kv_index_blocks") == blocks + 9,
                   "the KV index holding 3 blocks per adapter")
        # ... and the router scored none of them for another adapter.
        self.assertEqual(self.gw.metric("dynamo_frontend_kv_routed_cached_prefix_total"),
                         routed_cached)
        for model in ("sql", "chat", "base"):
            status, body = self.complete(model, prompt)
            self.assertEqual(status, 200, body)
            self.assertEqual(body["usage"]["prompt_tokens_details"]["cached_tokens"],
                             3 * self.block, model)
        self.assertEqual(self.gw.metric("dynamo_frontend_kv_routed_cached_prefix_total"),
                         routed_cached + 3)

    def test_an_unknown_model_is_404(self):
        status, body = self.complete("nope", "hello")
        self.assertEqual(status, 404, body)
        self.assertEqual(body["error"]["message"], "The model `nope` does not exist.")

    def test_load_and_unload_at_run_time(self):
        def post(path, body):
            status, headers, raw = self.gw.request("POST", path, body)
            return status, raw.decode()

        self.assertEqual(post("/v1/load_lora_adapter",
                              {"lora_name": "fresh", "lora_path": "/p/fresh"}),
                         (200, "Success: LoRA adapter 'fresh' added successfully."))
        self.assertEqual(self.models()["fresh"]["root"], "/p/fresh")
        status, body = self.complete("fresh", "hello there")
        self.assertEqual((status, body["model"]), (200, "fresh"))
        status, raw = post("/v1/load_lora_adapter", {"lora_name": "fresh", "lora_path": "/q"})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(raw)["error"]["type"], "InvalidUserInput")
        self.assertEqual(json.loads(raw)["error"]["message"],
                         "The lora adapter 'fresh' has already been loaded.")
        status, raw = post("/v1/load_lora_adapter", {"lora_name": "x"})
        self.assertEqual(status, 400)
        self.assertEqual(post("/v1/unload_lora_adapter", {"lora_name": "fresh"}),
                         (200, "Success: LoRA adapter 'fresh' removed successfully."))
        self.assertNotIn("fresh", self.models())
        self.assertEqual(self.complete("fresh", "hello")[0], 404)
        status, raw = post("/v1/unload_lora_adapter", {"lora_name": "fresh"})
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(raw)["error"]["message"],
                         "The lora adapter 'fresh' cannot be found.")
        status, raw = post("/v1/load_lora_adapter", b"{not json")
        self.assertEqual(status, 400)
        # The gateway kept serving.
        self.assertEqual(self.complete("sql", "still here")[0], 200)

    def test_load_and_unload_reach_every_worker(self):
        def post(path, body):
            status, _, raw = self.gw.request("POST", path, body)
            return status, raw.decode()

        clients = worker_clients(self.fleet.fleet_file)
        try:
            self.assertEqual(post("/v1/load_lora_adapter", {"lora_name": "pre", "lora_path": "/p"}),
                             (200, "Success: LoRA adapter 'pre' added successfully."))
            # Every worker has it resident now: a load asked directly changes nothing there.
            for c in clients:
                self.assertIs(c.lora_load("pre"), False)
            self.assertEqual(post("/v1/unload_lora_adapter", {"lora_name": "pre"}),
                             (200, "Success: LoRA adapter 'pre' removed successfully."))
            # ... and none holds it after the unload.
            for c in clients:
                self.assertIs(c.lora_unload("pre"), False)
            # The protocol refuses a name the engine refuses, and keeps serving.
            with self.assertRaises(LoraRefused) as refused:
                clients[0].lora_load("bad\u0001name")
            self.assertEqual(refused.exception.message["result"], "invalid_argument")
            self.assertIn("control character 0x01", refused.exception.message["message"])
            self.assertIsInstance(clients[0].stats()["ranks"], list)
        finally:
            for c in clients:
                c.close()

    def test_per_adapter_metrics_in_a_scrape(self):
        before = scrape(self.gw)
        key = ("mocker_gateway:lora_requests_total", frozenset({("lora", "chat"),
                                                                ("status", "200")}))
        ttft = ("mocker_gateway:lora_time_to_first_token_seconds_count",
                frozenset({("lora", "chat")}))
        e2e = ("mocker_gateway:lora_request_duration_seconds_count",
               frozenset({("lora", "chat")}))
        for _ in range(2):
            self.assertEqual(self.complete("chat", "per adapter")[0], 200)
        self.assertEqual(self.complete("base", "not an adapter")[0], 200)
        after = scrape(self.gw)
        for k in (key, ttft, e2e):
            self.assertEqual(after[k] - before.get(k, 0.0), 2.0, k)
        # The base model has no series of its own; every label is an adapter the gateway serves.
        served = set(self.models()) - {"base"}
        for name, labels in after:
            if name.startswith("mocker_gateway:lora_"):
                self.assertIn(dict(labels)["lora"], served, name)

    def test_a_request_in_flight_finishes_after_its_adapter_is_unloaded(self):
        self.assertEqual(self.gw.request("POST", "/v1/load_lora_adapter",
                                         {"lora_name": "brief", "lora_path": "/p"})[0], 200)
        conn = self.gw.connection()
        try:
            conn.request("POST", "/v1/completions",
                         body=json.dumps({"model": "brief", "prompt": "go on", "max_tokens": 300,
                                          "ignore_eos": True, "stream": True,
                                          "stream_options": {"include_usage": True}}),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            self.assertEqual(response.status, 200)
            first = response.readline()  # http.client undoes the chunked framing
            self.assertTrue(first.startswith(b"data: {"), first)
            # Tokens flow; the adapter goes away: new requests naming it are refused, this one
            # runs to its end (vLLM: requests already in the engine finish).
            self.assertEqual(self.gw.request("POST", "/v1/unload_lora_adapter",
                                             {"lora_name": "brief"})[0], 200)
            self.assertEqual(self.complete("brief", "new")[0], 404)
            raw = first + response.read()
        finally:
            conn.close()
        payloads = sse_payloads(raw)
        self.assertEqual(payloads[-1], "[DONE]")
        chunks = [json.loads(p) for p in payloads[:-1]]
        self.assertTrue(all(c["model"] == "brief" for c in chunks))
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 300)
        self.assertIn("length", [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]])


class LoraWorkerRefusesTest(unittest.TestCase):
    def test_a_worker_without_lora_refuses_the_load_with_vllms_error(self):
        fleet = FleetServe("--num-workers", "2", *paced(1, 1))  # max_loras 0: LoRA off
        try:
            gw = Gateway([], "--fleet", fleet.fleet_file, "--lora-modules", "sql",
                         "--allow-runtime-lora-updating")
            try:
                status, _, raw = gw.request("POST", "/v1/load_lora_adapter",
                                            {"lora_name": "x", "lora_path": "/x"})
                self.assertEqual(status, 400, raw)
                error = json.loads(raw)["error"]
                self.assertEqual((error["type"], error["code"]), ("BadRequestError", 400))
                self.assertEqual(error["message"],
                                 "LoRA adapter 'x' could not be loaded: worker 0: unsupported: "
                                 "lora_load: LoRA is off on this engine (max_loras 0); worker 1: "
                                 "unsupported: lora_load: LoRA is off on this engine "
                                 "(max_loras 0)")
                _, _, raw = gw.request("GET", "/v1/models")
                self.assertNotIn("x", [m["id"] for m in json.loads(raw)["data"]])
                # vLLM: an unload is answered with success whatever the engine said.
                status, _, raw = gw.request("POST", "/v1/unload_lora_adapter", {"lora_name": "sql"})
                self.assertEqual((status, raw), (200, b"Success: LoRA adapter 'sql' removed "
                                                      b"successfully."))
            finally:
                gw.close()
        finally:
            fleet.close()


class LoraFlagsTest(unittest.TestCase):
    def test_without_the_flag_the_update_routes_are_404(self):
        fleet = FleetServe("--num-workers", "1", "--max-loras", "1", *paced(1, 1))
        try:
            gw = Gateway([], "--fleet", fleet.fleet_file, "--lora-modules", "sql")
            try:
                status, _, raw = gw.request("POST", "/v1/load_lora_adapter",
                                            {"lora_name": "x", "lora_path": "/x"})
                self.assertEqual(status, 404, raw)
                status, _, raw = gw.request("POST", "/v1/completions",
                                            {"model": "sql", "prompt": "hi", "max_tokens": 2})
                self.assertEqual(status, 200, raw)
                self.assertEqual(json.loads(raw)["model"], "sql")
            finally:
                gw.close()
        finally:
            fleet.close()

    def test_bad_lora_modules_are_refused_at_start(self):
        for flags, needle in ((["a\x01b"], b"control character"),
                              (["sql", "sql=/p"], b"'sql' is given twice"),
                              (["mocker"], b"is the base model's name"),
                              (["sql="], b"the path is empty"),
                              (['{"name": "j", "path": "/p", "x": 1}'], b"unknown key 'x'"),
                              (['{"name": "j"'], b"invalid JSON")):
            r = subprocess.run([mocker_bin(), "gateway", "--connect", "tcp://127.0.0.1:5999",
                                "--lora-modules", *flags], capture_output=True, timeout=WAIT_S)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(needle, r.stderr)


if __name__ == "__main__":
    unittest.main()
