"""Helpers shared by the deploy tests: the binary and source tree from the environment, commands
that must succeed, the port of an endpoint, Debian package lookups."""

import os
import re
import subprocess
import sys

MOCKER = os.environ.get("MOCKER_BIN", "")
SOURCE_DIR = os.environ.get("MOCKER_SOURCE_DIR", "")


def require_env():
    if not MOCKER or not SOURCE_DIR:
        sys.exit("set MOCKER_BIN and MOCKER_SOURCE_DIR (ctest does)")


def run(cmd, **kwargs):
    """Runs cmd; returns its stdout; raises with stdout and stderr when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kwargs)
    if done.returncode != 0:
        raise AssertionError(f"{cmd!r} exited {done.returncode}\nstdout:\n{done.stdout}\n"
                             f"stderr:\n{done.stderr}")
    return done.stdout


def endpoint_port(endpoint):
    """The port of tcp://HOST:PORT or HOST:PORT."""
    m = re.fullmatch(r"(?:tcp://)?(.*):(\d+)", endpoint)
    if not m:
        raise AssertionError(f"not a TCP endpoint with a port: {endpoint!r}")
    return int(m.group(2))


def endpoint_host(endpoint):
    m = re.fullmatch(r"(?:tcp://)?(.*):(\d+)", endpoint)
    if not m:
        raise AssertionError(f"not a TCP endpoint with a port: {endpoint!r}")
    return m.group(1)


def _dpkg_owner(path):
    done = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    # "libzmq5:amd64: /usr/lib/x86_64-linux-gnu/libzmq.so.5.2.4"
    return done.stdout.splitlines()[0].split(":")[0].split(",")[0].strip()


def package_of(path):
    """The Debian package that ships the shared library at path (merged /usr aware)."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p[len("/usr"):])
        else:
            candidates.append("/usr" + p)
    for p in candidates:
        owner = _dpkg_owner(p)
        if owner:
            return owner
    raise AssertionError(f"no Debian package ships {path}")


def needed_libraries(binary):
    """The binary's direct shared-library dependencies (DT_NEEDED), as {soname: path}."""
    dynamic = run(["readelf", "-d", binary])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    resolved = ldd(binary)
    missing = [n for n in needed if n not in resolved]
    if missing:
        raise AssertionError(f"ldd does not resolve {missing}")
    return {n: resolved[n] for n in needed}


def ldd(binary):
    """Every library ldd reports (direct and indirect), as {soname: path}."""
    libs = {}
    for line in run(["ldd", binary]).splitlines():
        line = line.strip()
        if "not found" in line:
            raise AssertionError(f"ldd {binary}: {line}")
        m = re.match(r"(\S+) => (/\S+)", line)
        if m:
            libs[m.group(1)] = m.group(2)
        else:
            m = re.match(r"(/\S+) \(0x", line)  # the dynamic loader
            if m:
                libs[os.path.basename(m.group(1))] = m.group(1)
    return libs


def depends_closure(packages):
    """packages and every installed package they depend on (Depends, Pre-Depends), recursively;
    an alternative (a | b) contributes each of its installed members."""
    seen = set()
    todo = list(packages)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        done = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg],
                              capture_output=True, text=True)
        if done.returncode != 0:
            continue  # not installed: contributes nothing
        for clause in done.stdout.split(","):
            for alt in clause.split("|"):
                name = alt.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
    return seen
