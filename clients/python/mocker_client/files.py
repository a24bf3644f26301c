"""Files `mocker` writes that a client reads: the fleet file (`mocker serve --fleet-file FILE`)
and CURVE key files (`mocker keygen`).
"""

import collections
import json

# Fleet file (`mocker serve --fleet-file FILE`)

FLEET_FILE_VERSION = 1

FleetRank = collections.namedtuple("FleetRank", "dp_rank kv_events kv_replay fpm")
FleetRank.__doc__ = "One DP rank's endpoints; None for a socket the worker does not open."
FleetWorker = collections.namedtuple("FleetWorker", "worker_id submit cancel ranks handoff",
                                     defaults=(None,))
FleetWorker.__doc__ = ("One worker: its id, submit and cancel endpoints, its ranks (FleetRank) "
                       "and its handoff endpoint (prefill workers; None otherwise).")
Fleet = collections.namedtuple(
    "Fleet", "version mocker_version model_name engine_type block_size dp_size http workers")
Fleet.__doc__ = "A fleet file: what the process serves, and its workers (FleetWorker)."


def load_fleet(path):
    """Reads a fleet file written by `mocker serve --fleet-file FILE` into a Fleet.

    Raises ValueError naming the file and what is wrong (not JSON, another format or version,
    a missing or mistyped field). Each worker's `client()` is `MockerClient.connect(w.submit,
    w.cancel)`.
    """
    def fail(why):
        raise ValueError("%s: %s" % (path, why))

    with open(path, "rb") as f:
        try:
            j = json.load(f)
        except ValueError as e:
            fail("not JSON: %s" % e)
    if not isinstance(j, dict) or j.get("format") != "mocker-fleet":
        fail('not a mocker fleet file ("format" must be "mocker-fleet")')
    if j.get("version") != FLEET_FILE_VERSION:
        fail("version %r is not supported (this client reads %d)"
             % (j.get("version"), FLEET_FILE_VERSION))

    def text(o, key, where, nullable=False):
        v = o.get(key) if isinstance(o, dict) else None
        if v is None and nullable and key in o:
            return None
        if not isinstance(v, str) or not v:
            fail("%s%s: expected a non-empty string%s" % (where, key, " or null" if nullable else ""))
        return v

    def uint(o, key, where):
        v = o.get(key) if isinstance(o, dict) else None
        if type(v) is not int or v < 0:
            fail("%s%s: expected an unsigned integer" % (where, key))
        return v

    dp_size = uint(j, "dp_size", "")
    workers = j.get("workers")
    if not isinstance(workers, list) or not workers:
        fail("workers: expected a non-empty array")
    out = []
    for i, w in enumerate(workers):
        where = "workers[%d]." % i
        if not isinstance(w, dict):
            fail(where[:-1] + ": expected an object")
        ranks = w.get("ranks")
        if not isinstance(ranks, list) or len(ranks) != dp_size:
            fail("%sranks: expected %d entries (dp_size)" % (where, dp_size))
        out_ranks = []
        for r, rank in enumerate(ranks):
            rw = "%sranks[%d]." % (where, r)
            if uint(rank, "dp_rank", rw) != r:
                fail("%sdp_rank: expected %d" % (rw, r))
            out_ranks.append(FleetRank(r, text(rank, "kv_events", rw, True),
                                       text(rank, "kv_replay", rw, True),
                                       text(rank, "fpm", rw, True)))
        handoff = text(w, "handoff", where, True) if "handoff" in w else None
        out.append(FleetWorker(uint(w, "worker_id", where), text(w, "submit", where),
                               text(w, "cancel", where), out_ranks, handoff))
    return Fleet(FLEET_FILE_VERSION, text(j, "mocker_version", ""), text(j, "model_name", ""),
                 text(j, "engine_type", ""), uint(j, "block_size", ""), dp_size,
                 text(j, "http", "", True), out)


def read_key_file(path):
    """The Z85 key (bytes) on the first line of a key file written by `mocker keygen`."""
    with open(path, "rb") as f:
        key = f.readline().strip()
    if len(key) != 40:
        raise ValueError("%s: the first line is not a Z85 key (40 characters)" % path)
    return key
