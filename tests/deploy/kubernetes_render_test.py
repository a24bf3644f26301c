#!/usr/bin/env python3
"""deploy/kubernetes rendered with `kubectl kustomize` agrees with the binary: the ConfigMap is a
configuration the binary accepts; the StatefulSet's arguments are `mocker serve` flags (from
`mocker serve --help`) that set what they are meant to; container ports, Service ports, probes
and the Prometheus annotations match the ports of `mocker config --dump` for that configuration;
the probe and scrape paths answer on a real `mocker serve` started with the rendered arguments.

KUBECTL names the kubectl to use (default: kubectl on PATH; Debian package kubernetes-client)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
import unittest
import urllib.error
import urllib.request

import yaml

import deploy_util as du

KUBECTL = os.environ.get("KUBECTL", "kubectl")
SAMPLE_POD_INDEX = "7"
# Endpoint key in the dump -> container port name; kv_events, kv_replay and fpm are per DP rank.
PER_WORKER = {"submit": "submit", "cancel": "cancel"}
PER_RANK = {"kv_events": "kv-events", "kv_replay": "kv-replay", "fpm": "fpm"}


def serve_help_flags():
    """{flag: (config key or None, takes a value)} for every option `mocker serve --help` lists.
    An option's entry is its names (comma-separated, boolean negations with {false}), the value's
    type in capitals if it takes one, then its help, which may start on the next line and ends
    with [config.key]."""
    flags = {}
    names = []
    for line in du.run([du.MOCKER, "serve", "--help"]).splitlines():
        if re.match(r"  -", line):
            names = [re.sub(r"\{.*\}$", "", n) for n in line.split()[0].split(",")]
            takes_value = re.match(r"  \S+ [A-Z]+(\s|$)", line) is not None
            for n in names:
                flags[n] = (None, takes_value)
        key = re.search(r"\[([a-z_.]+)\]\s*$", line)
        if key and names:
            for n in names:
                flags[n] = (key.group(1), flags[n][1])
        if not line.strip():
            names = []
    return flags


def dig(table, dotted):
    for part in dotted.split("."):
        table = table[part]
    return table


class KubernetesRenderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if shutil.which(KUBECTL) is None:
            raise AssertionError(f"{KUBECTL} not found (Debian package kubernetes-client)")
        cls.tmp = tempfile.mkdtemp(prefix="mocker-k8s-")
        rendered = du.run([KUBECTL, "kustomize", os.path.join(du.SOURCE_DIR, "deploy/kubernetes")])
        cls.objects = {}
        for doc in yaml.safe_load_all(rendered):
            cls.objects.setdefault(doc["kind"], []).append(doc)
        for kind in ("ConfigMap", "Service", "StatefulSet"):
            if len(cls.objects.get(kind, [])) != 1:
                raise AssertionError(f"expected one {kind}, rendered {sorted(cls.objects)}")
        cls.config_map = cls.objects["ConfigMap"][0]
        cls.service = cls.objects["Service"][0]
        cls.sts = cls.objects["StatefulSet"][0]
        cls.pod = cls.sts["spec"]["template"]
        containers = cls.pod["spec"]["containers"]
        if len(containers) != 1:
            raise AssertionError(f"expected one container per pod, got {len(containers)}")
        cls.container = containers[0]
        cls.args = cls.container["args"]
        cls.help_flags = serve_help_flags()

        # The configuration file the pod reads: which ConfigMap key, written here.
        config_flag = cls.args.index("--config")
        cls.config_path_in_pod = cls.args[config_flag + 1]
        mount = next(m for m in cls.container["volumeMounts"]
                     if cls.config_path_in_pod.startswith(m["mountPath"].rstrip("/") + "/"))
        volume = next(v for v in cls.pod["spec"]["volumes"] if v["name"] == mount["name"])
        cls.config_volume = volume
        cls.config_key = os.path.relpath(cls.config_path_in_pod, mount["mountPath"])
        cls.config_file = os.path.join(cls.tmp, "mocker.toml")
        with open(cls.config_file, "w") as f:
            f.write(cls.config_map["data"][cls.config_key])
        # The pod's arguments as the pod runs them, with the file here and $(VAR)s substituted.
        cls.local_args = [cls.config_file if a == cls.config_path_in_pod else
                          a.replace("$(POD_INDEX)", SAMPLE_POD_INDEX) for a in cls.args]
        cls.dump = tomllib.loads(du.run([du.MOCKER, "config", "--dump"] + cls.local_args[1:]))
        cls.container_ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def http_port(self):
        http = self.dump["endpoints"]["http"]
        self.assertTrue(http["enabled"], "the HTTP endpoint must be enabled for the probes")
        return du.endpoint_port(http["endpoint"])

    def expected_ports(self):
        """{container port name: port} from the dumped configuration."""
        endpoints = self.dump["endpoints"]
        ports = {name: du.endpoint_port(endpoints[key]["endpoint"])
                 for key, name in PER_WORKER.items()}
        dp_size = self.dump["engine"]["dp_size"]
        enabled = {"kv_events": self.dump["kv_events"]["enabled"],
                   "kv_replay": self.dump["kv_events"]["enabled"] and
                   self.dump["kv_events"]["replay_enabled"],
                   "fpm": self.dump["fpm"]["enabled"]}
        for key, name in PER_RANK.items():
            if not enabled[key]:
                continue
            base = du.endpoint_port(endpoints[key]["endpoint"])
            for rank in range(dp_size):
                ports[name if rank == 0 else f"{name}-{rank}"] = base + rank
        ports["http"] = self.http_port()
        return ports

    def test_config_map_is_the_pod_config_and_the_repository_file(self):
        self.assertEqual(self.config_volume["configMap"]["name"],
                         self.config_map["metadata"]["name"])
        with open(os.path.join(du.SOURCE_DIR, "deploy/kubernetes/mocker.toml")) as f:
            self.assertEqual(self.config_map["data"][self.config_key], f.read())

    def test_arguments_are_serve_flags_and_set_their_keys(self):
        self.assertEqual(self.args[0], "serve")
        i = 1
        while i < len(self.args):
            flag = self.args[i]
            self.assertIn(flag, self.help_flags, f"{flag} is not a `mocker serve` flag")
            key, takes_value = self.help_flags[flag]
            if takes_value:
                self.assertLess(i + 1, len(self.args), f"{flag} needs a value")
                if key is not None:
                    value = self.local_args[i + 1]
                    self.assertEqual(str(dig(self.dump, key)), value, f"{flag} did not set {key}")
                i += 2
            else:
                i += 1
        self.assertEqual(self.dump["fpm"]["worker_id"], SAMPLE_POD_INDEX)

    def test_argument_variables_are_defined(self):
        env = {e["name"]: e for e in self.container.get("env", [])}
        for arg in self.args:
            for var in re.findall(r"\$\((\w+)\)", arg):
                self.assertIn(var, env, f"{arg} uses $({var}), which the container does not set")
        self.assertEqual(env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "metadata.labels['apps.kubernetes.io/pod-index']")

    def test_every_endpoint_binds_on_all_interfaces(self):
        for key in list(PER_WORKER) + list(PER_RANK):
            ep = self.dump["endpoints"][key]
            self.assertFalse(ep["connect"], key)
            self.assertIn(du.endpoint_host(ep["endpoint"]), ("*", "0.0.0.0"), key)
        self.assertEqual(du.endpoint_host(self.dump["endpoints"]["http"]["endpoint"]), "0.0.0.0")

    def test_container_ports_are_the_port_plan(self):
        self.assertEqual(self.container_ports, self.expected_ports())

    def test_headless_service_exposes_the_same_ports(self):
        spec = self.service["spec"]
        self.assertEqual(spec["clusterIP"], "None")
        self.assertEqual(self.sts["spec"]["serviceName"], self.service["metadata"]["name"])
        labels = self.pod["metadata"]["labels"]
        for k, v in spec["selector"].items():
            self.assertEqual(labels.get(k), v, f"Service selector {k}")
        for k, v in self.sts["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v, f"StatefulSet selector {k}")
        service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in spec["ports"]}
        self.assertEqual(service_ports,
                         {name: (port, name) for name, port in self.container_ports.items()})

    def test_probes_and_scrape_annotations_use_the_http_endpoint(self):
        http = self.http_port()
        ready = self.container["readinessProbe"]["httpGet"]
        alive = self.container["livenessProbe"]["httpGet"]
        self.assertEqual(ready["path"], "/ready")
        self.assertEqual(alive["path"], "/health")
        for probe in (ready, alive):
            port = probe["port"]
            self.assertEqual(self.container_ports[port] if isinstance(port, str) else port, http)
        annotations = self.pod["metadata"]["annotations"]
        self.assertEqual(annotations["prometheus.io/scrape"], "true")
        self.assertEqual(int(annotations["prometheus.io/port"]), http)
        self.assertEqual(annotations["prometheus.io/path"], "/metrics")

    def test_resources_and_non_root(self):
        resources = self.container["resources"]
        for what in ("cpu", "memory"):
            self.assertIn(what, resources["requests"])
        self.assertIn("memory", resources["limits"])
        security = self.pod["spec"]["securityContext"]
        self.assertTrue(security["runAsNonRoot"])
        self.assertNotEqual(security["runAsUser"], 0)

    def test_probe_and_scrape_paths_answer_on_a_real_service(self):
        """`mocker serve` with the rendered arguments, every endpoint moved to an ephemeral
        loopback port: /ready, /health and /metrics answer 200 once it serves."""
        annotations = self.pod["metadata"]["annotations"]
        paths = [self.container["readinessProbe"]["httpGet"]["path"],
                 self.container["livenessProbe"]["httpGet"]["path"],
                 annotations["prometheus.io/path"]]
        loopback = []
        for key in list(PER_WORKER) + list(PER_RANK):
            loopback += [f"--{key.replace('_', '-')}-endpoint", "tcp://127.0.0.1:*"]
        proc = du.start([du.MOCKER] + self.local_args + loopback +
                        ["--http-endpoint", "127.0.0.1:0"], os.path.join(self.tmp, "probe.log"))
        try:
            lines = []
            http = None
            for line in proc.stdout:
                lines.append(line.strip())
                if line.startswith("http "):
                    http = line.split()[1]
                if line.strip() == "ready":
                    break
            self.assertIsNotNone(http, f"no http endpoint line in {lines}")
            base = http if http.startswith("http://") else f"http://{http}"
            for path in paths:
                deadline = time.monotonic() + 10
                while True:
                    try:
                        with urllib.request.urlopen(base + path, timeout=5) as r:
                            self.assertEqual(r.status, 200, path)
                            break
                    except urllib.error.HTTPError as e:
                        if time.monotonic() > deadline:
                            raise AssertionError(f"{path}: {e.code}") from e
                    time.sleep(0.05)  # poll with a deadline
        finally:
            du.stop(proc)

    def start_worker(self, host, ports=None):
        """A real `mocker serve` on host: ephemeral ports, or the given {endpoint key: port}.
        Returns (process, {endpoint key: port}) once it serves."""
        args = [du.MOCKER, "serve", "--speedup-ratio", "0", "--no-http"]
        for key in list(PER_WORKER) + list(PER_RANK):
            port = ports[key] if ports else "*"
            args += [f"--{key.replace('_', '-')}-endpoint", f"tcp://{host}:{port}"]
        proc = du.start(args, os.path.join(self.tmp, f"serve-{host}.log"))
        bound = {}
        for line in proc.stdout:
            words = line.split()
            if len(words) == 2 and words[1].startswith("tcp://"):
                bound[words[0].removesuffix("[0]")] = du.endpoint_port(words[1])
            if line.strip() == "ready":
                return proc, bound
        du.stop(proc)
        raise AssertionError(f"mocker serve on {host} exited: {du.log_of(proc)}")

    def test_fleet_file_drives_live_replay_and_index(self):
        """fleet.py on EndpointSlices of two ready workers (and one that is not ready) with the
        rendered Service's port names: its arguments drive `mocker replay --mode live` over both
        workers and `mocker index --verify --once` agrees with both. The two workers share their
        ports on 127.0.0.1 and 127.0.0.2, as two pods share a Service's ports."""
        a, ports = self.start_worker("127.0.0.1")
        workers = [a]
        try:
            b, _ = self.start_worker("127.0.0.2", ports)
            workers.append(b)
            by_name = {name: ports[key] for key, name in {**PER_WORKER, **PER_RANK}.items()}
            slice_ports = [{"name": p["name"], "port": by_name[p["name"]], "protocol": "TCP"}
                           for p in self.service["spec"]["ports"] if p["name"] in by_name]
            endpoint_slices = {"kind": "List", "items": [{
                "metadata": {"namespace": "sim", "labels": {
                    "kubernetes.io/service-name": self.service["metadata"]["name"]}},
                "ports": slice_ports,
                "endpoints": [
                    {"addresses": ["127.0.0.2"], "hostname": "mocker-1",
                     "conditions": {"ready": True}},
                    {"addresses": ["127.0.0.3"], "hostname": "mocker-2",
                     "conditions": {"ready": False}},
                    {"addresses": ["127.0.0.1"], "hostname": "mocker-0",
                     "conditions": {"ready": True}}]}]}
            fleet = os.path.join(du.SOURCE_DIR, "deploy/kubernetes/fleet.py")

            def fleet_args(mode, *extra):
                out = du.run(["/usr/bin/python3", fleet, mode, *extra],
                             input=json.dumps(endpoint_slices))
                return out.split()

            names = fleet_args("replay")
            self.assertEqual(names[:4], [
                "--connect", f"tcp://mocker-0.mocker.sim.svc.cluster.local:{ports['submit']}",
                "--connect-cancel",
                f"tcp://mocker-0.mocker.sim.svc.cluster.local:{ports['cancel']}"])
            self.assertEqual(len(names), 8)  # two ready workers, two pairs each

            trace = os.path.join(du.SOURCE_DIR, "tests/data/tiny_trace.jsonl")
            report = os.path.join(self.tmp, "report.json")
            out = du.run([du.MOCKER, "replay", trace, "--mode", "live", "--router", "round_robin",
                          "--arrival-speedup-ratio", "1000", "--report-json", report]
                         + fleet_args("replay", "--address"))
            self.assertIn("Live: 2 server(s)", out)
            with open(report) as f:
                summary = json.load(f)
            self.assertGreater(json.dumps(summary).count("completed"), 0)

            out = du.run([du.MOCKER, "index", "--verify", "--once", "--query-endpoint", "none"]
                         + fleet_args("index", "--address"))
            self.assertIn("verify: OK (2 source(s)", out)
            self.assertRegex(out, r"worker 0 rank 0: index [1-9]\d* block")
            self.assertRegex(out, r"worker 1 rank 0: index [1-9]\d* block")
        finally:
            for w in workers:
                du.stop(w)


if __name__ == "__main__":
    du.require_env()
    unittest.main(verbosity=2)
