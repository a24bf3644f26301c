#!/usr/bin/env python3
"""The HTML pages in a real browser: headless Chromium renders the replay reports of a 1-worker
and an 8-worker run and a `mocker compare` page, and every chart must have drawn its series.

    MOCKER_BIN=build/mocker tests/tools/browser_report_test.py OUT_DIR

Each page carries a check script (tools/replay/svg_plot.h) that, once the page has loaded, counts
the drawn series elements of every chart from the renderer's geometry (getBBox), writes the count
to the chart's data-drawn attribute, records script errors, and marks <html data-render-check>.
This test reads those attributes from the DOM Chromium dumps after the scripts ran (--dump-dom)
and checks, per chart, that the count equals the number of series the page holds (> 0), that
every expected chart is there, and that no script error occurred. Screenshots go to OUT_DIR
(printed). Runs as root (--no-sandbox), offline (no network use), each browser run bounded by a
timeout.
"""

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BROWSER_TIMEOUT_S = 90


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("FAIL: chromium not found (Debian package `chromium`, in scripts/dev PACKAGES)")


def browser(args, profile):
    cmd = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--no-first-run", "--disable-dev-shm-usage",
           "--disable-extensions", "--disable-sync", "--hide-scrollbars",
           "--user-data-dir=" + profile] + args
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S,
                         check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr[-2000:]}")
    return run.stdout


def mocker(*args):
    run = subprocess.run([os.environ["MOCKER_BIN"], *args], capture_output=True, text=True,
                         timeout=120, check=False)
    if run.returncode != 0:
        sys.exit(f"FAIL: mocker {' '.join(args)} exited {run.returncode}:\n{run.stderr}")
    return run.stdout


def series_per_chart(html):
    """Chart id -> number of series elements in the page source."""
    counts = {}
    for m in re.finditer(r'<svg class="chart" data-chart="([^"]+)"(.*?)</svg>', html, re.S):
        counts[m.group(1)] = m.group(2).count('class="series"')
    return counts


def check_page(name, path, expected_charts, out_dir, profile, failures):
    with open(path, encoding="utf-8") as f:
        source = f.read()
    want = series_per_chart(source)
    dom = browser(["--dump-dom", "file://" + path], profile)
    root = re.search(r"<html[^>]*>", dom)
    root = root.group(0) if root else ""
    check = re.search(r'data-render-check="([^"]*)"', root)
    errors = re.search(r'data-errors="([^"]*)"', root)
    if not check:
        failures.append(f"{name}: the check script did not run (no data-render-check on <html>)")
    elif check.group(1) != "ok":
        failures.append(f"{name}: data-render-check = {check.group(1)!r}")
    if errors and errors.group(1):
        failures.append(f"{name}: script errors: {errors.group(1)}")
    drawn = {}
    for m in re.finditer(r"<svg [^>]*>", dom):
        tag = m.group(0)
        chart = re.search(r'data-chart="([^"]+)"', tag)
        if not chart or 'class="chart"' not in tag:
            continue
        count = re.search(r'data-drawn="(\d+)"', tag)
        drawn[chart.group(1)] = int(count.group(1)) if count else None
    for chart in expected_charts:
        if chart not in want:
            failures.append(f"{name}: chart {chart} missing from the page")
    for chart, n in sorted(want.items()):
        got = drawn.get(chart)
        if n == 0:
            failures.append(f"{name}: chart {chart} has no series in the page")
        elif got != n:
            failures.append(f"{name}: chart {chart} drew {got} of its {n} series")
    shot = os.path.join(out_dir, name + ".png")
    height = 1200 + 230 * len(want)
    browser([f"--window-size=1280,{min(height, 8000)}", "--screenshot=" + shot,
             "file://" + path], profile)
    if not os.path.exists(shot) or os.path.getsize(shot) == 0:
        failures.append(f"{name}: no screenshot written")
    return f"{name}: {len(want)} charts, {sum(want.values())} series drawn; screenshot {shot}"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out_dir = os.path.abspath(sys.argv[1])
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="mocker-browser-")
    try:
        # A small trace: the first 120 requests of the public sample when it is there (data/
        # traces is optional), else the repository's tiny test trace.
        trace = os.path.join(work, "trace.jsonl")
        sample = os.path.join(ROOT, "data", "traces", "mooncake_synthetic_trace.jsonl")
        if os.path.exists(sample):
            with open(sample, encoding="utf-8") as src, open(trace, "w", encoding="utf-8") as dst:
                for i, line in enumerate(src):
                    if i >= 120:
                        break
                    dst.write(line)
        else:
            shutil.copy(os.path.join(ROOT, "tests", "data", "tiny_trace.jsonl"), trace)
        one = os.path.join(work, "one.json")
        eight = os.path.join(work, "eight.json")
        mocker("replay", trace, "--report-json", one, "--report-html",
               os.path.join(work, "one.html"), "--goodput", "ttft:2000", "e2el:20000")
        mocker("replay", trace, "--num-workers", "8", "--router", "kv", "--report-json", eight,
               "--report-html", os.path.join(work, "eight.html"))
        mocker("compare", one, eight, "--html", os.path.join(work, "compare.html"))

        base = ["ttft_cdf", "tpot_cdf", "e2e_cdf", "ttft_vs_arrival", "throughput",
                "prefix_hit_rate", "preemptions", "kv_usage", "batch"]
        per_worker = (["requests_per_worker"] + [f"kv_rank_{r}" for r in range(8)]
                      + [f"batch_rank_{r}" for r in range(8)])
        pages = [("report_1_worker", "one.html", base),
                 ("report_8_workers", "eight.html", base + per_worker),
                 ("compare", "compare.html",
                  ["cmp_ttft_ms", "cmp_tpot_ms", "cmp_itl_ms", "cmp_e2e_latency_ms"])]
        # The three pages in parallel (a browser start takes ~2 s, mostly waiting), each with its
        # own profile directory.
        failures = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(pages)) as pool:
            jobs = [pool.submit(check_page, name, os.path.join(work, page), charts, out_dir,
                                os.path.join(work, "profile-" + name), failures)
                    for name, page, charts in pages]
            for job in jobs:
                print(job.result())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s):", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    print("ok: every chart drew every series, no script errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
