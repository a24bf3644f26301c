#!/usr/bin/python3
"""A module stays below the layers it must not know: net/ (the transport layer) never includes
the engine, the publishers, the service, the tools, the gateway or spdlog.

Every net/ header and source is preprocessed by the real compiler (`-E -H`: every header it
opens, with its nesting), so an include that arrives through another header is caught too
(net/client.h → service/security.h → service/config.h → spdlog is how the client used to pull
the engine's configuration in). A file the compiler cannot preprocess fails the check as well,
so the check cannot pass by not looking.

  layering_test.py --root DIR --compiler CXX   check DIR/net (run by ctest)
  layering_test.py --self-test --compiler CXX  check that the scanner catches a direct and a
                                               transitive forbidden include and passes a clean
                                               module (ctest too)
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile

# Repository folders net/ must not include from, and third-party headers it must not see.
FORBIDDEN_DIRS = ("engine", "publishers", "service", "tools", "gateway")
FORBIDDEN_THIRD_PARTY = ("spdlog",)


def include_tree(compiler, root, path, extra_flags):
    """[(depth, header)] of every header the compiler opens for `path`, in order."""
    cmd = [compiler, "-std=c++20", "-E", "-H", "-o", os.devnull, "-I", root, *extra_flags, path]
    if path.endswith(".h"):
        cmd[1:1] = ["-x", "c++"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{path}: the compiler failed:\n{run.stderr.strip()}")
    tree = []
    for line in run.stderr.splitlines():
        dots = len(line) - len(line.lstrip("."))
        if dots and line[dots:dots + 1] == " ":
            tree.append((dots, os.path.normpath(line[dots + 1:])))
    return tree


def forbidden(root, header):
    """Why `header` may not be included from the module, or None."""
    rel = os.path.relpath(header, root)
    if not rel.startswith(".."):
        top = rel.split(os.sep)[0]
        if top in FORBIDDEN_DIRS:
            return f"{top}/"
    parts = header.split(os.sep)
    for name in FORBIDDEN_THIRD_PARTY:
        if name in parts:
            return name
    return None


def shown(root, path):
    """`path` relative to the repository, or as it is when outside it."""
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def check_file(compiler, root, path, extra_flags):
    """Problems of one file: each forbidden header with the chain of includes that reached it (a
    forbidden header's own includes are not reported again)."""
    problems = []
    chain = []  # (header, forbidden?) from the file's first include down to the current one
    for depth, header in include_tree(compiler, root, path, extra_flags):
        del chain[depth - 1:]
        why = forbidden(root, header)
        inside_reported = any(bad for _, bad in chain)
        chain.append((header, why is not None))
        if why and not inside_reported:
            via = " → ".join([shown(root, path)] + [shown(root, h) for h, _ in chain])
            problems.append(f"{shown(root, path)} includes {why} ({via})")
    return problems


def check_module(compiler, root, module, extra_flags=()):
    folder = os.path.join(root, module)
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                   if f.endswith((".h", ".cpp")))
    if not files:
        return [f"{module}/: no header or source to check"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda f: check_file(compiler, root, f, list(extra_flags)), files)
        return [p for r in results for p in r]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def self_test(compiler):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        system = os.path.join(tmp, "system")
        write(os.path.join(system, "spdlog", "spdlog.h"), "#pragma once\n")
        write(os.path.join(root, "engine", "config.h"), "#pragma once\n")
        write(os.path.join(root, "base", "result.h"), "#pragma once\n")
        write(os.path.join(root, "service", "config.h"),
              "#pragma once\n#include <spdlog/spdlog.h>\n#include \"engine/config.h\"\n")
        write(os.path.join(root, "net", "clean.h"), "#pragma once\n#include \"base/result.h\"\n")
        write(os.path.join(root, "net", "clean.cpp"), "#include \"net/clean.h\"\n")
        flags = ["-isystem", system]
        if check_module(compiler, root, "net", flags):
            failures.append("a clean module was reported")
        write(os.path.join(root, "net", "direct.h"), "#pragma once\n#include <spdlog/spdlog.h>\n")
        write(os.path.join(root, "net", "through.h"),
              "#pragma once\n#include \"base/result.h\"\n#include \"service/config.h\"\n")
        found = check_module(compiler, root, "net", flags)
        expected = ["net/direct.h includes spdlog",
                    "net/through.h includes service/ (net/through.h → service/config.h)"]
        for e in expected:
            if not any(p.startswith(e) for p in found):
                failures.append(f"not caught: {e!r} (found {found})")
        if len(found) != len(expected):
            failures.append(f"expected {len(expected)} reports, got {found}")
        write(os.path.join(root, "net", "broken.h"), "#include \"net/missing.h\"\n")
        try:
            check_module(compiler, root, "net", flags)
            failures.append("a file that does not preprocess passed")
        except RuntimeError:
            pass
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    parser.add_argument("--compiler", default="c++")
    parser.add_argument("--module", default="net")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        failures = self_test(args.compiler)
        for f in failures:
            print(f"self-test: {f}")
        print("self-test:", "FAILED" if failures else "ok")
        return 1 if failures else 0
    try:
        problems = check_module(args.compiler, os.path.abspath(args.root), args.module)
    except RuntimeError as e:
        print(e)
        return 1
    for p in problems:
        print(p)
    print(f"{args.module}/:", f"{len(problems)} forbidden include(s)" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
