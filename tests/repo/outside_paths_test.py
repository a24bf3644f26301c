#!/usr/bin/python3
"""The repository stands on its own: no tracked file points outside it.

Scans every tracked text file (`git ls-files`; a filesystem walk when the tree is not a git
checkout) and fails naming file:line for
  * a relative path that climbs out of the repository (`..` segments resolved from the file's
    folder), and any path into the old `shared` folder beside the repository (`..`/`shared`),
    whatever folder the file is in;
  * an absolute path into a machine's work or home folders (/work, /home/<user>, /Users/<user>,
    /root);
  * a section number of a document that is not in the repository (an `engine.md`, `wire.md` or
    `replay.md` section § number; our reference docs are docs/*.md, with named sections);
  * a project issue number (`issue` `#5`); an upstream one names its repository first
    (owner/name issue ...).

This file itself is scanned too, so it spells every pattern so that it does not match itself.

  outside_paths_test.py                   check the repository this file is in (run by ctest)
  outside_paths_test.py --root DIR        check another tree
  outside_paths_test.py --self-test       check that the scanner catches each kind (ctest too)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Folders a filesystem walk leaves out (build trees, VCS data, caches).
SKIP_DIRS = {".git", "__pycache__", ".cache"}
SKIP_DIR_PREFIXES = ("build",)

# Written with a character class so this file does not match its own patterns.
ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(?:[w]ork/|[h]ome/[\w.-]+|[U]sers/[\w.-]+|[r]oot/)")
SECTION = re.compile(r"\b(?:engine|wire|replay|traces|reports|metrics)\.md`?\s*[§]\s*\d")
ISSUE = re.compile(r"\b[i]ssue #\d+")
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+\s+$")  # "owner/name " right before "issue #N"
RELATIVE = re.compile(r"(?:\.\.[/])+[^\s\"'`)\]>,;:]*")
SHARED = re.compile(r"\.\.[/]shared\b")


def tracked_files(root):
    """Repository-relative paths: git ls-files, or a walk when git cannot list the tree."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
        if out:
            return sorted(p.decode() for p in out.split(b"\0") if p)
    except (OSError, subprocess.CalledProcessError):
        pass
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs
                   if d not in SKIP_DIRS and not d.startswith(SKIP_DIR_PREFIXES)]
        for name in files:
            paths.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(paths)


def read_text(path):
    """The file's lines, or None for a binary file (a NUL byte) or one that cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines()


def escapes(root, rel_file, target):
    """True when `target`, resolved from the folder of rel_file, lies outside root."""
    base = os.path.dirname(os.path.join(root, rel_file))
    resolved = os.path.normpath(os.path.join(base, target))
    return os.path.commonpath([os.path.abspath(root), os.path.abspath(resolved)]) != \
        os.path.abspath(root)


def scan(root):
    """Every finding as 'file:line: what: text'."""
    findings = []
    for rel in tracked_files(root):
        lines = read_text(os.path.join(root, rel))
        if lines is None:
            continue
        for number, line in enumerate(lines, 1):
            problems = []
            for m in RELATIVE.finditer(line):
                if escapes(root, rel, m.group(0)) or SHARED.match(m.group(0)):
                    problems.append(f"path leaves the repository ({m.group(0)})")
            for m in ABSOLUTE.finditer(line):
                problems.append(f"absolute machine path ({m.group(0)})")
            for m in SECTION.finditer(line):
                problems.append(f"section of a document outside the repository ({m.group(0)})")
            for m in ISSUE.finditer(line):
                if not UPSTREAM.search(line[:m.start()]):
                    problems.append(f"project issue number ({m.group(0)})")
            for p in problems:
                findings.append(f"{rel}:{number}: {p}: {line.strip()[:120]}")
    return findings


def self_test():
    """The scanner must name file:line for each kind of outside reference, and nothing else."""
    up = ".." + "/"
    shared = "sha" + "red"  # split so that no grep for outside paths finds this file
    bad = {
        "a.md": "See `" + up + shared + "/spec/engine.md` for details.\n",
        "sub/b.h": "// ok: " + up + "b.h stays inside\n// spec in " + up * 3 + "outside/x.md\n",
        "sub/deeper/c.cpp": "// rule of engine.md " + "§5.5 applies; " + up + shared + " too\n",
        "d.py": "# from /" + "work/" + shared + "/data\npath = '/" + "home/alice/x'\n",
        "e.txt": "fixed by issue " + "#5; vllm-project/vllm issue " + "#45174 is upstream\n",
        "f.md": "docs/engine.md, Length limits; protocol/README.md §1.2; https://example.com/"
                "home/x; /root is fine without a slash\n",
    }
    want = {"a.md:1", "sub/b.h:2", "sub/deeper/c.cpp:1", "d.py:1", "d.py:2", "e.txt:1"}
    want_count = len(want) + 1  # c.cpp line 1 has two findings
    with tempfile.TemporaryDirectory(prefix="outside_paths_") as tmp:
        for rel, text in bad.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(tmp, "g.bin"), "wb") as f:
            f.write(b"\0" + up.encode() * 2 + b"x /" + b"work/y")
        findings = scan(tmp)  # not a git checkout: exercises the filesystem walk
    got = {":".join(f.split(":")[:2]) for f in findings}
    if got != want or len(findings) != want_count:
        print("self-test failed; findings:\n  " + "\n  ".join(findings), file=sys.stderr)
        print(f"expected exactly one finding at each of {sorted(want)}", file=sys.stderr)
        return 1
    print(f"self-test ok: {len(findings)} planted references found, clean lines left alone")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    findings = scan(args.root)
    if findings:
        print(f"{len(findings)} reference(s) outside the repository:", file=sys.stderr)
        for f in findings:
            print("  " + f, file=sys.stderr)
        return 1
    print(f"ok: {len(tracked_files(args.root))} files, no reference outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
