#!/usr/bin/env python3
"""The Dockerfile, checked without a Docker daemon against the built binary:
* both stages are Debian 12; the build stage builds with scripts/dev;
* the run stage's RUNTIME_PACKAGES are exactly the packages of the libraries the binary links
  (readelf -d NEEDED, mapped with dpkg -S), and with their dependencies cover every library ldd
  reports;
* EXPOSE is the port plan of the image's configuration (`mocker config --dump`) plus the
  `mocker index` query port (`mocker index --help`);
* the image runs as a non-root user and serves the configuration it copies in;
* the HEALTHCHECK command, run by bash as Docker would, fails with nothing listening and while
  the service is starting (/ready 503), and succeeds once it serves."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
import unittest

import deploy_util as du


def without_sanitizer_runtimes(libs):
    """`libs` (soname -> path) less the sanitizer runtimes a sanitizer build of the tests links
    (scripts/dev's ASan+UBSan stage); the image builds the plain Release binary, which does not."""
    if not os.environ.get("MOCKER_SANITIZE"):
        return libs
    return {k: v for k, v in libs.items()
            if not k.startswith(("libasan.", "libubsan.", "libtsan.", "liblsan."))}


def dockerfile():
    with open(os.path.join(du.SOURCE_DIR, "Dockerfile")) as f:
        text = f.read()
    # Join continuation lines, drop comments: one instruction per line.
    text = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines()
                                          if not l.lstrip().startswith("#")))
    return [l.strip() for l in text.splitlines() if l.strip()]


def instructions(lines, name):
    return [l[len(name):].strip() for l in lines if l.split()[0].upper() == name]


class DockerfileTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.lines = dockerfile()
        froms = [i for i, l in enumerate(cls.lines) if l.upper().startswith("FROM ")]
        if len(froms) != 2:
            raise AssertionError(f"expected a build and a run stage, got {len(froms)} FROM lines")
        cls.build_stage = cls.lines[froms[0]:froms[1]]
        cls.run_stage = cls.lines[froms[1]:]
        cls.tmp = tempfile.mkdtemp(prefix="mocker-docker-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def image_config(self):
        """The configuration file the image's CMD serves, from the repository."""
        copies = instructions(self.run_stage, "COPY")
        cmd = json.loads(instructions(self.run_stage, "CMD")[-1])
        path_in_image = cmd[cmd.index("--config") + 1]
        for c in copies:
            parts = c.split()
            if parts[-1] == path_in_image:
                return os.path.join(du.SOURCE_DIR, parts[0])
        raise AssertionError(f"no COPY puts {path_in_image} into the image")

    def test_stages_are_debian_12_and_the_build_uses_scripts_dev(self):
        self.assertEqual(self.build_stage[0].split()[1], "debian:bookworm")
        self.assertEqual(self.run_stage[0].split()[1], "debian:bookworm")
        self.assertTrue(any("scripts/dev build" in r for r in instructions(self.build_stage, "RUN")))

    def test_runtime_packages_are_the_linked_libraries(self):
        args = [a for a in instructions(self.run_stage, "ARG") if a.startswith("RUNTIME_PACKAGES=")]
        self.assertEqual(len(args), 1)
        listed = set(args[0].split("=", 1)[1].strip('"').split())
        libs = without_sanitizer_runtimes(du.needed_libraries(du.MOCKER))
        owners = du.packages_of(list(libs.values()))
        needed = {soname: owners[path] for soname, path in libs.items()}
        print("NEEDED -> package: " + ", ".join(f"{k} {v}" for k, v in sorted(needed.items())))
        self.assertEqual(listed, set(needed.values()))
        closure = du.depends_closure(listed)
        every = without_sanitizer_runtimes(du.ldd(du.MOCKER))
        owners = du.packages_of(list(every.values()))
        for soname, path in every.items():
            pkg = owners[path]
            self.assertIn(pkg, closure, f"ldd reports {soname} from {pkg}, not brought in by "
                          f"RUNTIME_PACKAGES")
        # The run stage installs them and the package, and nothing else.
        run = " ".join(instructions(self.run_stage, "RUN"))
        self.assertIn("--no-install-recommends ${RUNTIME_PACKAGES}", run)
        self.assertEqual([i.strip() for i in re.findall(r"apt-get install[^&]*", run)],
                         ["apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES}"])

    def test_exposed_ports_are_the_port_plan(self):
        dump = tomllib.loads(du.run([du.MOCKER, "config", "--dump", "--config",
                                     self.image_config()]))
        plan = {du.endpoint_port(ep["endpoint"]) for ep in dump["endpoints"].values()}
        index_help = du.run([du.MOCKER, "index", "--help"])
        query = re.search(r"--query-endpoint.*?(tcp://\S+?:\d+)", index_help, re.S)
        self.assertIsNotNone(query, "no default query endpoint in `mocker index --help`")
        plan.add(du.endpoint_port(query.group(1)))
        exposed = {int(p) for e in instructions(self.run_stage, "EXPOSE") for p in e.split()}
        self.assertEqual(exposed, plan)
        # The health check asks the HTTP endpoint the image's configuration enables.
        http = dump["endpoints"]["http"]
        self.assertTrue(http["enabled"])
        env = dict(e.split("=", 1) for e in instructions(self.run_stage, "ENV"))
        self.assertEqual(int(env["MOCKER_HEALTH_PORT"]), du.endpoint_port(http["endpoint"]))

    def test_runs_as_non_root(self):
        users = instructions(self.run_stage, "USER")
        self.assertEqual(len(users), 1)
        self.assertNotIn(users[0].split(":")[0], ("0", "root"))
        run = " ".join(instructions(self.run_stage, "RUN"))
        uid = users[0].split(":")[0]
        self.assertIn(f"useradd --system --uid {uid}", run)
        self.assertEqual(json.loads(instructions(self.run_stage, "ENTRYPOINT")[0]), ["mocker"])

    def healthcheck(self, port):
        """Runs the HEALTHCHECK command as Docker does (exec form, the image's ENV), with the
        health port set to port; returns its exit code."""
        check = instructions(self.run_stage, "HEALTHCHECK")
        self.assertEqual(len(check), 1)
        cmd = json.loads(check[0][check[0].index("CMD") + 3:].strip())
        env = dict(os.environ)
        for e in instructions(self.run_stage, "ENV"):
            k, v = e.split("=", 1)
            env[k] = v
        self.assertIn("MOCKER_HEALTH_PORT", env)
        env["MOCKER_HEALTH_PORT"] = str(port)
        return subprocess.run(cmd, env=env, capture_output=True, timeout=30).returncode

    def start_serve(self, *extra):
        loopback = []
        for key in ("submit", "cancel", "kv-events", "kv-replay", "fpm"):
            loopback += [f"--{key}-endpoint", "tcp://127.0.0.1:*"]
        proc = du.start([du.MOCKER, "serve", "--config", self.image_config()] + loopback +
                        ["--http-endpoint", "127.0.0.1:0"] + list(extra),
                        os.path.join(self.tmp, "serve.log"))
        for line in proc.stdout:
            if line.startswith("http "):
                return proc, du.endpoint_port(line.split()[1].removeprefix("http://"))
        du.stop(proc)
        raise AssertionError(f"`mocker serve` printed no http endpoint line: {du.log_of(proc)}")

    def test_healthcheck_follows_ready(self):
        # Nothing listening: a port that was just bound and released.
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        self.assertNotEqual(self.healthcheck(closed), 0)

        # Still starting (startup time not over): /ready answers 503.
        proc, port = self.start_serve("--startup-time", "60")
        try:
            self.assertNotEqual(self.healthcheck(port), 0)
        finally:
            du.stop(proc)

        # Serving.
        proc, port = self.start_serve()
        try:
            for line in proc.stdout:
                if line.strip() == "ready":
                    break
            self.assertEqual(self.healthcheck(port), 0)
        finally:
            du.stop(proc)


if __name__ == "__main__":
    du.require_env()
    unittest.main(verbosity=2)
