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


def _candidates(path):
    """path as given and resolved, each with and without the /usr prefix (merged /usr: dpkg
    knows one of them)."""
    out = []
    for p in (path, os.path.realpath(path)):
        out += [p, p[len("/usr"):] if p.startswith("/usr/") else "/usr" + p]
    return out


def packages_of(paths):
    """{path: the Debian package that ships it}, with one dpkg-query call (each call reads
    every package's file list)."""
    wanted = {c: p for p in paths for c in _candidates(p)}
    done = subprocess.run(["dpkg-query", "-S"] + sorted(wanted), capture_output=True, text=True)
    owners = {}
    for line in done.stdout.splitlines():
        # "libzmq5:amd64: /usr/lib/x86_64-linux-gnu/libzmq.so.5.2.4"
        pkgs, _, found = line.rpartition(": ")
        if found in wanted and "," not in pkgs:
            owners[wanted[found]] = pkgs.split(":")[0]
    missing = [p for p in paths if p not in owners]
    if missing:
        raise AssertionError(f"no Debian package ships {missing}")
    return owners


def package_of(path):
    """The Debian package that ships the file at path."""
    return packages_of([path])[path]


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
    depends = {}
    for line in run(["dpkg-query", "-W", "-f=${Package}\t${Depends}, ${Pre-Depends}\n"]).splitlines():
        name, _, deps = line.partition("\t")
        depends[name] = [alt.strip().split(" ")[0].split(":")[0]
                         for clause in deps.split(",") for alt in clause.split("|") if alt.strip()]
    seen = set()
    todo = list(packages)
    while todo:
        pkg = todo.pop()
        if pkg not in seen:
            seen.add(pkg)
            todo += depends.get(pkg, [])  # not installed: contributes nothing
    return seen


def start(cmd, log_path):
    """Starts cmd with its stdout readable line by line and its stderr in log_path."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    proc.log_path = log_path
    log.close()  # the child has its own descriptor
    return proc


def stop(proc):
    """SIGTERM, wait, close the pipe."""
    if proc.poll() is None:
        proc.terminate()
    proc.communicate(timeout=30)


def log_of(proc):
    with open(proc.log_path) as f:
        return f.read()[-4000:]
