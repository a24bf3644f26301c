#!/usr/bin/env python3
"""The Debian package: `cpack -G DEB` in the build directory (into a temporary directory),
`dpkg -x` into a temporary root, then `<root>/usr/bin/mocker --version`, the example
configuration (byte-identical to docs/mocker.example.toml and valid for the packaged binary), the
docs, the file list (nothing else) and the Depends line (a package for every library the binary
links)."""

import argparse
import filecmp
import glob
import os
import re
import shutil
import tempfile
import unittest

import deploy_util as du

ARGS = None
DOC_DIR = "usr/share/doc/mocker"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--cpack", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--docs", required=True, help="source,name,source,name,... (CMake's list)")
    return p.parse_known_args()


class DebianPackageTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mocker-deb-")
        out = os.path.join(cls.tmp, "out")
        du.run([ARGS.cpack, "-G", "DEB", "-B", out], cwd=ARGS.build_dir)
        debs = glob.glob(os.path.join(out, "*.deb"))
        if len(debs) != 1:
            raise AssertionError(f"cpack made {debs}, expected one .deb")
        cls.deb = debs[0]
        cls.root = os.path.join(cls.tmp, "root")
        du.run(["dpkg", "-x", cls.deb, cls.root])
        docs = ARGS.docs.split(",")
        cls.docs = dict(zip(docs[1::2], docs[0::2]))  # installed name -> source path

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_file_name_and_control_fields(self):
        self.assertRegex(os.path.basename(self.deb),
                         rf"^mocker_{re.escape(ARGS.version)}_[a-z0-9]+\.deb$")
        fields = du.run(["dpkg-deb", "-f", self.deb, "Package", "Version"])
        self.assertIn("Package: mocker", fields)
        self.assertIn(f"Version: {ARGS.version}", fields)

    def test_file_list_is_the_binary_config_and_docs(self):
        listing = du.run(["dpkg-deb", "-c", self.deb])
        print("package files:\n" + listing)
        files = set()
        for line in listing.splitlines():
            path = line.split()[5]
            if not path.endswith("/"):
                files.add(path.removeprefix("./"))
        expected = {"usr/bin/mocker", f"{DOC_DIR}/mocker.example.toml"}
        expected |= {f"{DOC_DIR}/{name}" for name in self.docs}
        self.assertEqual(files, expected)

    def test_installed_binary_runs(self):
        binary = os.path.join(self.root, "usr/bin/mocker")
        self.assertTrue(os.access(binary, os.X_OK))
        self.assertEqual(du.run([binary, "--version"]).strip(), f"mocker {ARGS.version}")

    def test_example_config_is_the_repository_one_and_valid(self):
        example = os.path.join(self.root, DOC_DIR, "mocker.example.toml")
        self.assertTrue(filecmp.cmp(example, os.path.join(du.SOURCE_DIR, "docs/mocker.example.toml"),
                                    shallow=False))
        out = du.run([os.path.join(self.root, "usr/bin/mocker"), "config", "--config", example])
        self.assertEqual(out.strip(), "configuration OK")

    def test_docs_are_the_repository_ones(self):
        self.assertIn("serve.md", self.docs)
        for name, source in self.docs.items():
            installed = os.path.join(self.root, DOC_DIR, name)
            self.assertTrue(filecmp.cmp(installed, os.path.join(du.SOURCE_DIR, source),
                                        shallow=False), f"{name} differs from {source}")

    def test_reference_docs_and_python_client_are_shipped(self):
        for name in ("docs/engine.md", "docs/wire.md", "docs/traces.md", "docs/metrics.md",
                     "docs/failure-drills.md", "clients/python/README.md",
                     "clients/python/mocker_client/__init__.py",
                     "clients/python/mocker_client/wire.py"):
            self.assertIn(name, self.docs)

    def test_shipped_python_client_imports(self):
        # The package is shipped whole: importing it from the installed doc directory needs
        # every one of its modules.
        clients = os.path.join(self.root, DOC_DIR, "clients/python")
        out = du.run(["/usr/bin/python3", "-c",
                      "import sys; sys.path.insert(0, sys.argv[1]); import mocker_client; "
                      "print(mocker_client.__file__, mocker_client.MockerClient.__name__, "
                      "mocker_client.DisaggregatedClient.__name__)", clients])
        self.assertIn(os.path.join(clients, "mocker_client", "__init__.py"), out)
        self.assertIn("MockerClient DisaggregatedClient", out)

    def test_help_points_at_the_installed_docs(self):
        binary = os.path.join(self.root, "usr/bin/mocker")
        for command in ("serve", "replay"):
            out = du.run([binary, command, "--help"])
            self.assertIn(f"/{DOC_DIR}/mocker.example.toml", out, command)

    def test_depends_names_a_package_for_every_linked_library(self):
        depends = du.run(["dpkg-deb", "-f", self.deb, "Depends"])
        print("Depends: " + depends.strip())
        named = {d.strip().split(" ")[0] for alt in depends.split(",") for d in alt.split("|")}
        binary = os.path.join(self.root, "usr/bin/mocker")
        libs = du.needed_libraries(binary)
        owners = du.packages_of(list(libs.values()))
        for soname, path in libs.items():
            pkg = owners[path]
            # Depends may name a virtual package that the library's package provides
            # (libspdlog1.10 provides libspdlog1.10-fmt9).
            provides = du.run(["dpkg-query", "-W", "-f=${Provides}", pkg])
            names = {pkg} | {p.strip().split(" ")[0] for p in provides.split(",") if p.strip()}
            self.assertTrue(names & named, f"{soname} ({pkg}) is not in Depends: {depends}")


if __name__ == "__main__":
    du.require_env()
    ARGS, rest = parse_args()
    unittest.main(argv=[__file__] + rest, verbosity=2)
