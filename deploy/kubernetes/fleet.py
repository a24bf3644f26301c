#!/usr/bin/python3
"""Builds a fleet file from the mocker Service's EndpointSlices: the command-line arguments that
point `mocker replay --mode live` or `mocker index` at every ready worker pod.

  kubectl get endpointslices -l kubernetes.io/service-name=mocker -o json \\
    | deploy/kubernetes/fleet.py replay > fleet.replay     # --connect …  --connect-cancel …
  … | deploy/kubernetes/fleet.py index > fleet.index       # --worker ID=tcp://HOST:KV_EVENTS,…

One argument pair per line, workers in ordinal order. HOST is the pod's DNS name under the
headless Service, <pod>.<service>.<namespace>.svc.<cluster domain> (--address: its IP instead).
Ports come from the slices' named ports (submit, cancel, kv-events, kv-replay), so they follow the
Service. The `mocker index` worker id is the pod's ordinal, which is also its FPM worker id
(statefulset.yaml). Pods that are not ready are left out (and counted on stderr)."""

import argparse
import json
import re
import sys


def ordinal(hostname):
    m = re.search(r"-(\d+)$", hostname or "")
    if not m:
        raise SystemExit(f"fleet.py: endpoint hostname {hostname!r} is not a StatefulSet pod name")
    return int(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["replay", "index"])
    p.add_argument("--cluster-domain", default="cluster.local")
    p.add_argument("--address", action="store_true", help="use pod IPs, not DNS names")
    args = p.parse_args()

    data = json.load(sys.stdin)
    slices = data["items"] if data.get("kind") == "List" or "items" in data else [data]
    workers = {}
    not_ready = 0
    for s in slices:
        ports = {q["name"]: q["port"] for q in s.get("ports") or []}
        service = s["metadata"]["labels"]["kubernetes.io/service-name"]
        namespace = s["metadata"].get("namespace", "default")
        for ep in s.get("endpoints") or []:
            if not (ep.get("conditions") or {}).get("ready", False):
                not_ready += 1
                continue
            n = ordinal(ep.get("hostname"))
            host = (ep["addresses"][0] if args.address else
                    f"{ep['hostname']}.{service}.{namespace}.svc.{args.cluster_domain}")
            workers[n] = (host, ports)
    if not workers:
        raise SystemExit("fleet.py: no ready endpoints")
    for n in sorted(workers):
        host, ports = workers[n]
        need = ["submit", "cancel"] if args.mode == "replay" else ["kv-events", "kv-replay", "submit"]
        missing = [q for q in need if q not in ports]
        if missing:
            raise SystemExit(f"fleet.py: the Service has no port named {', '.join(missing)}")
        if args.mode == "replay":
            print(f"--connect tcp://{host}:{ports['submit']}")
            print(f"--connect-cancel tcp://{host}:{ports['cancel']}")
        else:
            print(f"--worker {n}=tcp://{host}:{ports['kv-events']},"
                  f"replay=tcp://{host}:{ports['kv-replay']},snapshot=tcp://{host}:{ports['submit']}")
    print(f"fleet.py: {len(workers)} ready workers, {not_ready} not ready", file=sys.stderr)


if __name__ == "__main__":
    main()
