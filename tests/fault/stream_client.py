#!/usr/bin/python3
"""A client process of the fault suite: streams requests from `mocker serve` and reports.

    stream_client.py --submit EP --cancel EP --routing-id ID [--requests N] [--max-tokens M]
                     [--prompt-len P] [--waves-until-eof] [--timeout S]

Submits N requests (ids "<wave>-<i>", distinct prompts) and reads every message with the
repository's Python client (mocker_client, which validates each one strictly). It prints one
JSON line per event on stdout:

  {"event": "streaming", "wave": 0}   every request of the first wave has received a token
  {"event": "wave", "wave": k, "t": t} wave k ended (every stream has its terminal) at t
                                      (time.monotonic(): CLOCK_MONOTONIC, the parent's clock)
  {"event": "summary", "streams": {id: {...}}, "unexpected": [...], "waves": k}

With --waves-until-eof it submits a new wave each time the previous one ended, until its stdin
reaches end of file (the parent closes it), so it is served for as long as the parent wants.
Per stream the summary has `tokens` (count), `gaps` (entries whose index did not continue the
stream), `finish`, `reason` and `acked`; `unexpected` lists every message that was not an ack,
an output entry or a reject of one of its own open requests (an error, an entry after a
terminal, another client's id, ...). Exit code 0 once the summary is printed; 1 when the
streams did not end within --timeout seconds (the summary is printed anyway).
"""

import argparse
import json
import os
import select
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "clients", "python"))

from mocker_client import MockerClient  # noqa: E402


def emit(**event):
    print(json.dumps(event, default=repr), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--submit", required=True)
    p.add_argument("--cancel", required=True)
    p.add_argument("--routing-id", required=True)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--prompt-base", type=int, default=1)
    p.add_argument("--waves-until-eof", action="store_true")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()

    streams = {}
    unexpected = []
    client = MockerClient.connect(args.submit, args.cancel, routing_id=args.routing_id)
    start = time.monotonic()
    deadline = start + args.timeout
    stdin_open = args.waves_until_eof
    wave = 0
    streaming_reported = False

    def submit_wave(w):
        ids = []
        for i in range(args.requests):
            rid = "%d-%d" % (w, i)
            base = args.prompt_base + 100_000 * (w * args.requests + i)
            streams[rid] = {"tokens": 0, "gaps": 0, "finish": None, "reason": None,
                            "acked": False}
            client.submit(rid, prompt=list(range(base, base + args.prompt_len)),
                          max_tokens=args.max_tokens)
            ids.append(rid)
        return ids

    open_ids = set(submit_wave(wave))
    wave_ids = sorted(open_ids)
    try:
        while time.monotonic() < deadline:
            if stdin_open and select.select([sys.stdin], [], [], 0)[0]:
                if not os.read(sys.stdin.fileno(), 4096):
                    stdin_open = False
            m = client.recv(0.05)
            if m is None:
                continue
            t = m["type"]
            if t == "submit_ack" and m["id"] in open_ids and not streams[m["id"]]["acked"]:
                streams[m["id"]]["acked"] = True
            elif t == "submit_reject" and m["id"] in open_ids:
                streams[m["id"]].update(finish="submit_reject", reason=m["reason"])
                open_ids.discard(m["id"])
            elif t == "output":
                for e in m["outputs"]:
                    s = streams.get(e["id"])
                    if s is None or e["id"] not in open_ids:
                        unexpected.append({"message": "output", "entry": e})
                        continue
                    if e["tokens"]:
                        if e["index"] != s["tokens"]:
                            s["gaps"] += 1
                        s["tokens"] += len(e["tokens"])
                    if e["finish"] is not None:
                        s.update(finish=e["finish"], reason=e["reason"])
                        open_ids.discard(e["id"])
            else:
                unexpected.append(m)
            if not streaming_reported and wave == 0 and all(
                    streams[i]["tokens"] > 0 or streams[i]["finish"] for i in wave_ids):
                streaming_reported = True
                emit(event="streaming", wave=0)
            if not open_ids:
                emit(event="wave", wave=wave, t=time.monotonic())
                if not stdin_open:
                    break
                wave += 1
                open_ids = set(submit_wave(wave))
                wave_ids = sorted(open_ids)
    finally:
        # Anything that arrives in a short while after the last terminal is unexpected.
        if not open_ids:
            m = client.recv(0.05)
            while m is not None:
                unexpected.append(m)
                m = client.recv(0)
        emit(event="summary", streams=streams, unexpected=unexpected, waves=wave + 1,
             open=sorted(open_ids))
        client.close()
    return 0 if not open_ids else 1


if __name__ == "__main__":
    sys.exit(main())
