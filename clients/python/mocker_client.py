#!/usr/bin/python3
"""Python client of `mocker serve` — client protocol v1 (protocol/README.md).

A single module with no package: it needs only python3-zmq and python3-msgpack (Debian's
/usr/bin/python3 has both). Copy it next to your script or put clients/python on sys.path.

    from mocker_client import MockerClient

    with MockerClient.connect("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556") as c:
        c.submit("r1", prompt=[1, 2, 3, 4], max_tokens=8)
        tokens = list(c.stream("r1"))          # blocks until the terminal entry
        print(tokens, c.terminal("r1")["finish"])  # [...] length

Design
------
* Two DEALER sockets share one routing id: the *submit* socket (submit, stats, kv_snapshot;
  receives acks, rejects, outputs, errors, replies) and the *cancel* socket (cancel and
  cancel_reply), so a cancel never waits behind this client's own submits and the service can
  match it to this client's requests.
* Messages received are returned as **plain dicts** with the wire keys ("v", "type", ...).
  Every optional field of the message type is present in the dict (None when the service
  omitted it or sent nil); unknown keys are kept as received. Routing ids ("client") are bytes.
* Everything the service sends is validated strictly before it is returned: one frame, a
  msgpack map with str keys, "v" == 1, a known service-to-client "type", each field's type and
  range (tokens are u32, hashes u64 strictly ascending, a non-terminal output entry has at least
  one token, ...). A violation raises ProtocolError naming the field — it is never ignored.
* Messages not consumed by a blocking helper (stream, stats, kv_snapshot, cancel with wait) are
  kept, in arrival order, and returned by later recv() calls, so several requests can be
  multiplexed on one client. stream(id) takes only its own entries out of an `output` message and
  leaves the rest of that message queued.

A fleet (`mocker serve --num-workers N --fleet-file fleet.json`): `load_fleet("fleet.json")`
returns every worker's id and endpoints; `MockerClient.connect(w.submit, w.cancel)` per worker.

Not thread-safe: use one MockerClient per thread.
"""

import collections
import json
import os
import time

import msgpack
import zmq

PROTOCOL_VERSION = 1
#: ZMQ_MAXMSGSIZE of the client sockets (protocol/README.md §4: message size limit 16 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_ID_BYTES = 256

FINISH_REASONS = frozenset({"length", "cancelled", "rejected", "error", "shutdown"})
ERROR_CODES = frozenset(
    {"invalid_argument", "corruption", "unsupported", "not_found", "io_error", "internal",
     "permission_denied", "resource_exhausted"})
CANCEL_RESULTS = frozenset({"applied", "not_found"})
#: Types a service sends; a client-to-service type received from the service is a protocol error.
SERVICE_TYPES = frozenset({"submit_ack", "submit_reject", "output", "cancel_reply", "error",
                           "stats_reply", "kv_snapshot_reply", "handoff"})
#: Bytes of a handoff ticket's `key` (the capability naming the held request on the prefill worker).
HANDOFF_KEY_BYTES = 16

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


class MockerError(Exception):
    """Base class of this module's exceptions."""


class ProtocolError(MockerError):
    """The service sent something that is not valid client protocol v1."""


class ServerError(MockerError):
    """The service answered with an `error` message (the dict is in `.message`). `.hop` is
    "prefill" or "decode" when a DisaggregatedClient received it, else None."""

    def __init__(self, message, hop=None):
        super().__init__("%s%s: %s" % ("%s worker: " % hop if hop else "", message["code"],
                                       message["message"]))
        self.message = message
        self.hop = hop


class SubmitRejected(MockerError):
    """The service refused a submit (`submit_reject`; the dict is in `.message`). `.hop` is
    "prefill" or "decode" when a DisaggregatedClient received it, else None."""

    def __init__(self, message, hop=None):
        super().__init__("%ssubmit %r rejected: %s"
                         % ("%s worker: " % hop if hop else "", message["id"], message["reason"]))
        self.message = message
        self.hop = hop


class HandedOff(MockerError):
    """stream(id) on a plain MockerClient met the `handoff` of a prefill worker: the request
    continues on a decode worker (use DisaggregatedClient). The ticket dict is in `.message`."""

    def __init__(self, message):
        super().__init__("request %r was handed off by a prefill worker (source %s): submit its "
                         "ticket to a decode worker (DisaggregatedClient)"
                         % (message["id"], message["ticket"]["source"]))
        self.message = message


# ------------------------------------------------------------------------------------------------
# Validation of service-to-client messages


def _type_name(value):
    return "nil" if value is None else type(value).__name__


def _check_uint(value, where, maximum=_U64):
    # bool is an int subclass in Python but a distinct msgpack type: refuse it.
    if type(value) is not int:
        raise ProtocolError("%s: expected unsigned integer, got %s" % (where, _type_name(value)))
    if value < 0 or value > maximum:
        raise ProtocolError("%s: %d out of range [0, %d]" % (where, value, maximum))
    return value


def _check_int(value, where):
    if type(value) is not int:
        raise ProtocolError("%s: expected integer, got %s" % (where, _type_name(value)))
    return value


def _check_float(value, where):
    if type(value) not in (float, int):
        raise ProtocolError("%s: expected float, got %s" % (where, _type_name(value)))
    return float(value)


def _check_str(value, where, max_bytes=None):
    if type(value) is not str:
        raise ProtocolError("%s: expected str, got %s" % (where, _type_name(value)))
    if max_bytes is not None and len(value.encode()) > max_bytes:
        raise ProtocolError("%s: longer than %d bytes" % (where, max_bytes))
    return value


def _check_id(value, where):
    _check_str(value, where, MAX_ID_BYTES)
    if not value:
        raise ProtocolError("%s: empty request id" % where)
    return value


def _check_bin(value, where):
    if type(value) is str:  # the protocol accepts str for routing ids
        return value.encode()
    if type(value) is not bytes:
        raise ProtocolError("%s: expected bin, got %s" % (where, _type_name(value)))
    return value


def _check_enum(value, where, allowed):
    _check_str(value, where)
    if value not in allowed:
        raise ProtocolError("%s: unknown value %r (expected one of %s)"
                            % (where, value, ", ".join(sorted(allowed))))
    return value


def _check_list(value, where):
    if type(value) is not list:
        raise ProtocolError("%s: expected array, got %s" % (where, _type_name(value)))
    return value


def _check_map(value, where):
    if type(value) is not dict:
        raise ProtocolError("%s: expected map, got %s" % (where, _type_name(value)))
    for key in value:
        if type(key) is not str:
            raise ProtocolError("%s: map key %r is not a str" % (where, key))
    return value


def _field(m, key, where, check, *args, optional=False):
    """Validates m[key] in place; an optional field that is absent or nil becomes None."""
    path = "%s%s" % (where, key)
    value = m.get(key)
    if value is None:
        if not optional:
            raise ProtocolError("%s: missing" % path if key not in m else "%s: nil" % path)
        m[key] = None
        return None
    m[key] = check(value, path, *args)
    return m[key]


def _validate_output_entry(e, where):
    _check_map(e, where[:-1])
    _field(e, "id", where, _check_id)
    _field(e, "index", where, _check_uint, _U32)
    tokens = _field(e, "tokens", where, _check_list)
    for i, t in enumerate(tokens):
        _check_uint(t, "%stokens[%d]" % (where, i), _U32)
    finish = _field(e, "finish", where, _check_enum, FINISH_REASONS, optional=True)
    _field(e, "reason", where, _check_str, optional=True)
    _field(e, "cached_tokens", where, _check_uint, _U32, optional=True)
    if finish is None and not tokens:
        raise ProtocolError("%stokens: a non-terminal entry has no tokens" % where)


def _check_key(value, where):
    if type(value) is not bytes:
        raise ProtocolError("%s: expected bin, got %s" % (where, _type_name(value)))
    if len(value) != HANDOFF_KEY_BYTES:
        raise ProtocolError("%s: %d bytes, expected %d" % (where, len(value), HANDOFF_KEY_BYTES))
    return value


def _validate_ticket(t, where):
    _check_map(t, where[:-1])
    _field(t, "source", where, _check_str)
    if not t["source"]:
        raise ProtocolError("%ssource: empty endpoint" % where)
    _field(t, "key", where, _check_key)
    for key in ("source_rank", "block_size", "prompt_len", "cached_tokens"):
        _field(t, key, where, _check_uint, _U32)
    _field(t, "transfer_ms", where, _check_float)
    if not t["transfer_ms"] >= 0.0:
        raise ProtocolError("%stransfer_ms: %r is not >= 0" % (where, t["transfer_ms"]))


def _validate_body(m):
    t = m["type"]
    if t == "handoff":
        _field(m, "id", "", _check_id)
        _field(m, "ticket", "", _check_map)
        _validate_ticket(m["ticket"], "ticket.")
        return
    if t == "submit_ack":
        _field(m, "id", "", _check_id)
        _field(m, "dp_rank", "", _check_uint, _U32)
    elif t == "submit_reject":
        _field(m, "id", "", _check_id)
        _field(m, "reason", "", _check_str)
    elif t == "output":
        outputs = _field(m, "outputs", "", _check_list)
        for i, e in enumerate(outputs):
            _validate_output_entry(e, "outputs[%d]." % i)
    elif t == "cancel_reply":
        _field(m, "id", "", _check_id)
        _field(m, "result", "", _check_enum, CANCEL_RESULTS)
    elif t == "error":
        _field(m, "code", "", _check_enum, ERROR_CODES)
        _field(m, "message", "", _check_str)
        # The id of a malformed message is reported best effort; it is any str here.
        _field(m, "id", "", _check_str, optional=True)
    elif t == "stats_reply":
        ranks = _field(m, "ranks", "", _check_list)
        for i, r in enumerate(ranks):
            w = "ranks[%d]." % i
            _check_map(r, w[:-1])
            for key in ("dp_rank",):
                _field(r, key, w, _check_uint, _U32)
            for key in ("active_blocks", "total_blocks", "running", "waiting", "preemptions",
                        "prefix_queries_tokens", "prefix_hit_tokens"):
                _field(r, key, w, _check_uint)
            for key in ("held", "pending_handoffs", "handoff_expired"):  # disaggregated workers
                _field(r, key, w, _check_uint, optional=True)
            usage = _field(r, "kv_usage", w, _check_float)
            if not 0.0 <= usage <= 1.0:
                raise ProtocolError("%skv_usage: %r outside [0, 1]" % (w, usage))
        _field(m, "routes", "", _check_uint)
        clients = _field(m, "clients", "", _check_list)
        for i, c in enumerate(clients):
            w = "clients[%d]." % i
            _check_map(c, w[:-1])
            _field(c, "client", w, _check_bin)
            _field(c, "routes", w, _check_uint)
    elif t == "kv_snapshot_reply":
        ranks = _field(m, "ranks", "", _check_list)
        for i, r in enumerate(ranks):
            w = "ranks[%d]." % i
            _check_map(r, w[:-1])
            _field(r, "dp_rank", w, _check_uint, _U32)
            hashes = _field(r, "block_hashes", w, _check_list)
            for j, h in enumerate(hashes):
                _check_uint(h, "%sblock_hashes[%d]" % (w, j))
                if j and h <= hashes[j - 1]:
                    raise ProtocolError("%sblock_hashes[%d]: not strictly ascending" % (w, j))
            _field(r, "last_seq", w, _check_uint, optional=True)


def read_key_file(path):
    """The Z85 key (bytes) on the first line of a key file written by `mocker keygen`."""
    with open(path, "rb") as f:
        key = f.readline().strip()
    if len(key) != 40:
        raise ValueError("%s: the first line is not a Z85 key (40 characters)" % path)
    return key


def decode_message(payload):
    """Decodes and validates one service-to-client message (bytes) into a dict.

    Raises ProtocolError naming what is wrong: bytes that are not one msgpack map, a missing or
    other protocol version, an unknown or client-to-service type, a field of the wrong type.
    """
    if len(payload) > MAX_MESSAGE_BYTES:
        raise ProtocolError("message of %d bytes exceeds %d" % (len(payload), MAX_MESSAGE_BYTES))
    try:
        m = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as e:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise ProtocolError("not a valid msgpack message: %s: %s" % (type(e).__name__, e))
    _check_map(m, "message")
    if "v" not in m:
        raise ProtocolError("v: missing")
    _check_uint(m["v"], "v")
    if m["v"] != PROTOCOL_VERSION:
        raise ProtocolError("v: protocol version %d is not supported (this client speaks "
                            "version %d)" % (m["v"], PROTOCOL_VERSION))
    if "type" not in m:
        raise ProtocolError("type: missing")
    _check_str(m["type"], "type")
    if m["type"] not in SERVICE_TYPES:
        raise ProtocolError("type: %r is not a message a service sends" % m["type"])
    _validate_body(m)
    return m


def encode_message(type_, **fields):
    """Encodes a client-to-service message: {"v": 1, "type": type_, **fields}, None fields omitted."""
    m = {"v": PROTOCOL_VERSION, "type": type_}
    m.update((k, v) for k, v in fields.items() if v is not None)
    return msgpack.packb(m, use_bin_type=True)


def _uint_list(values, name):
    out = list(values)
    for i, t in enumerate(out):
        if type(t) is not int or not 0 <= t <= _U32:
            raise ValueError("%s[%d]: %r is not a u32" % (name, i, t))
    return out


# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Client


class MockerClient:
    """A connection to one `mocker serve` (a DEALER pair sharing one routing id)."""

    def __init__(self, context, submit_socket, cancel_socket, routing_id, owns_context):
        self._context = context
        self._submit = submit_socket
        self._cancel = cancel_socket
        self.routing_id = routing_id
        self._owns_context = owns_context
        self._pending = collections.deque()  # validated messages not yet returned
        self._poller = zmq.Poller()
        self._poller.register(self._cancel, zmq.POLLIN)
        self._poller.register(self._submit, zmq.POLLIN)
        self.acks = {}       # request id -> dp_rank, filled by stream() from submit_ack
        self._terminals = {}  # request id -> the terminal output entry seen by stream()

    @classmethod
    def connect(cls, submit_endpoint, cancel_endpoint, routing_id=None, context=None,
                rcvhwm=1000, sndhwm=1000, curve_server_key=None, curve_public_key=None,
                curve_secret_key=None):
        """Connects both DEALERs. `routing_id` (bytes or str; default: 16 random hex characters)
        is shared by the two sockets. ZeroMQ connects lazily: this does not wait for the service.

        CURVE: give the service's public key and this client's key pair, Z85 (40 characters,
        bytes or str; see `read_key_file`), all three or none. With a key the service does not
        allow, the handshake is refused and nothing is ever received.
        """
        curve = [curve_server_key, curve_public_key, curve_secret_key]
        if any(k is not None for k in curve):
            if any(k is None for k in curve):
                raise ValueError("CURVE needs curve_server_key, curve_public_key and "
                                 "curve_secret_key together")
            curve = [k.encode() if isinstance(k, str) else k for k in curve]
            for name, k in zip(("curve_server_key", "curve_public_key", "curve_secret_key"),
                               curve):
                if not isinstance(k, bytes) or len(k) != 40:
                    raise ValueError("%s: expected a Z85 key of 40 characters" % name)
        else:
            curve = None
        if routing_id is None:
            routing_id = os.urandom(8).hex().encode()
        elif isinstance(routing_id, str):
            routing_id = routing_id.encode()
        if not 1 <= len(routing_id) <= 255 or routing_id[0] == 0:
            raise ValueError("routing_id: 1..255 bytes not starting with a zero byte")
        owns = context is None
        ctx = context or zmq.Context()
        sockets = []
        try:
            for endpoint in (submit_endpoint, cancel_endpoint):
                s = ctx.socket(zmq.DEALER)
                sockets.append(s)
                s.setsockopt(zmq.ROUTING_ID, routing_id)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
                s.setsockopt(zmq.RCVHWM, rcvhwm)
                s.setsockopt(zmq.SNDHWM, sndhwm)
                if curve:
                    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = curve
                s.connect(endpoint)
        except Exception:
            for s in sockets:
                s.close(0)
            if owns:
                ctx.term()
            raise
        return cls(ctx, sockets[0], sockets[1], routing_id, owns)

    def close(self):
        """Closes both sockets (and the context when this client created it)."""
        self._submit.close(0)
        self._cancel.close(0)
        if self._owns_context:
            self._context.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sending ---------------------------------------------------------------------------------

    def submit(self, id, prompt, max_tokens, output_tokens=None, dp_rank=None, arrival_ms=None,
               priority=None, handoff=None):
        """Sends a submit. `prompt` and `output_tokens` are sequences of u32 token ids; with
        `output_tokens` the planned output's length wins over `max_tokens`. Replies (submit_ack or
        submit_reject, then output entries) arrive later: use stream(id) or recv().

        `handoff`: the `ticket` dict of a prefill worker's `handoff` message, sent unchanged — only
        a decode worker accepts it (DisaggregatedClient does the two hops)."""
        if not isinstance(id, str) or not 1 <= len(id.encode()) <= MAX_ID_BYTES:
            raise ValueError("id: a str of 1..256 bytes")
        msg = {"id": id, "prompt": _uint_list(prompt, "prompt"), "max_tokens": int(max_tokens)}
        if output_tokens is not None:
            msg["output_tokens"] = _uint_list(output_tokens, "output_tokens")
        msg.update(dp_rank=dp_rank, arrival_ms=None if arrival_ms is None else float(arrival_ms),
                   priority=priority, handoff=handoff)
        self._terminals.pop(id, None)
        self.acks.pop(id, None)
        self.send_raw(encode_message("submit", **msg))

    def send_raw(self, payload, frames=None):
        """Sends raw bytes (one frame) on the submit socket — for tests of malformed input.
        `frames`, when given, is a list of frames sent as one multipart message instead."""
        if frames is not None:
            self._submit.send_multipart(frames)
        else:
            self._submit.send(payload)

    def send_raw_cancel(self, payload):
        """Sends raw bytes on the cancel socket (tests)."""
        self._cancel.send(payload)

    def cancel(self, id, client=None, wait=True, timeout=5.0):
        """Sends a cancel for request `id` on the cancel socket.

        `client` (bytes) names another client's routing id (default: this client's own). With
        `wait` (default) returns the reply's result, "applied" or "not_found"; other messages
        received meanwhile are kept for recv(). Without `wait` returns None and the cancel_reply
        comes through recv().
        """
        if isinstance(client, str):
            client = client.encode()
        self._cancel.send(encode_message("cancel", id=id, client=client))
        if not wait:
            return None
        reply = self._wait_for(lambda m: m["type"] == "cancel_reply" and m["id"] == id, timeout,
                               "cancel_reply for %r" % id, id_errors=id)
        return reply["result"]

    def stats(self, timeout=5.0):
        """Asks for load metrics; returns the `stats_reply` dict (ranks, routes, clients)."""
        self._submit.send(encode_message("stats"))
        return self._wait_for(lambda m: m["type"] == "stats_reply", timeout, "stats_reply",
                              anonymous_errors=True)

    def kv_snapshot(self, dp_rank=None, timeout=5.0):
        """Asks for the cached block hashes; returns {dp_rank: [hashes ascending]}.

        The full `kv_snapshot_reply` dict is kept in `self.last_kv_snapshot`: each rank's
        `last_seq`, when present, is the KV-event batch its hashes are at (compare an index
        with it once the index has applied that batch)."""
        self._submit.send(encode_message("kv_snapshot", dp_rank=dp_rank))
        reply = self._wait_for(lambda m: m["type"] == "kv_snapshot_reply", timeout,
                               "kv_snapshot_reply", anonymous_errors=True)
        self.last_kv_snapshot = reply
        return {r["dp_rank"]: r["block_hashes"] for r in reply["ranks"]}

    # -- receiving -------------------------------------------------------------------------------

    def _recv_socket_message(self, timeout):
        """One validated message from the sockets (cancel socket first), or None on timeout."""
        ms = None if timeout is None else max(0, int(timeout * 1000))
        events = dict(self._poller.poll(ms))
        for sock in (self._cancel, self._submit):
            if events.get(sock, 0) & zmq.POLLIN:
                frames = sock.recv_multipart(zmq.NOBLOCK)
                if len(frames) != 1:
                    raise ProtocolError("expected one frame per message, got %d" % len(frames))
                return decode_message(frames[0])
        return None

    def recv(self, timeout=None):
        """The next message (a validated dict), or None when nothing arrives within `timeout`
        seconds (None: wait forever; 0: do not wait). Queued messages come first."""
        if self._pending:
            return self._pending.popleft()
        return self._recv_socket_message(timeout)

    def _wait_for(self, match, timeout, what, id_errors=None, anonymous_errors=False):
        """Receives until match(message); non-matching messages are queued for recv().

        An `error` for request `id_errors`, or (with anonymous_errors) an error without an id,
        raises ServerError."""
        deadline = time.monotonic() + timeout
        # Queued messages first (without consuming the others).
        for i, m in enumerate(self._pending):
            if match(m):
                del self._pending[i]
                return m
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no %s within %.3g s" % (what, timeout))
            m = self._recv_socket_message(left)
            if m is None:
                continue
            if match(m):
                return m
            if m["type"] == "error" and (
                    (id_errors is not None and m["id"] == id_errors)
                    or (anonymous_errors and m["id"] is None)):
                raise ServerError(m)
            self._pending.append(m)

    def wait_ack(self, id, timeout=5.0):
        """Waits for the submit_ack of request `id` and returns its dp_rank (also recorded in
        self.acks). A submit_reject raises SubmitRejected, an `error` naming `id` ServerError.
        Output entries received meanwhile stay queued for stream(id) / recv()."""
        if id in self.acks:
            return self.acks[id]

        def match(m):
            if m["type"] == "submit_reject" and m["id"] == id:
                raise SubmitRejected(m)
            return m["type"] == "submit_ack" and m["id"] == id

        m = self._wait_for(match, timeout, "submit_ack for %r" % id, id_errors=id)
        self.acks[id] = m["dp_rank"]
        return m["dp_rank"]

    def terminal(self, id):
        """The terminal output entry of request `id` seen by stream() (finish, reason, ...), or
        None. Forgotten when `id` is submitted again."""
        return self._terminals.get(id)

    def stream(self, id, timeout=10.0):
        """Yields the output tokens (ints) of request `id`, in order, until its terminal entry.

        The terminal entry (a dict with "finish" and "reason") is the generator's return value
        and stays available as terminal(id). `timeout` bounds the wait for each next message
        (TimeoutError). The stream is checked: each entry's `index` must continue where the
        previous one ended (ProtocolError otherwise). A submit_reject for `id` raises
        SubmitRejected; an `error` naming `id` raises ServerError. The submit_ack's dp_rank is
        recorded in self.acks[id]. Messages for other requests are queued for recv() / their own
        stream(); entries of an `output` message that belong to other requests stay queued.
        """
        expected_index = 0
        while True:
            entries = self._take_entries(id, timeout)
            for e in entries:
                # Only entries with tokens are position-checked. A terminal entry without
                # tokens carries the position its next token would have had: the number of
                # tokens this client was sent (cancel, shutdown and backpressure terminals) or
                # the engine generated (a request that ends without a further token).
                if e["tokens"] and e["index"] != expected_index:
                    raise ProtocolError("request %r: output index %d, expected %d (gap or "
                                        "reordering)" % (id, e["index"], expected_index))
                for t in e["tokens"]:
                    yield t
                expected_index += len(e["tokens"])
                if e["finish"] is not None:
                    self._terminals[id] = e
                    return e

    def _take_entries(self, id, timeout, handoff_ok=False):
        """Removes and returns this request's entries of the first message that has any. A
        `handoff` for `id` is returned as [message] with `handoff_ok`, else raises HandedOff."""
        def extract(m):
            if m["type"] == "handoff" and m["id"] == id:
                if not handoff_ok:
                    raise HandedOff(m)
                return [m]
            if m["type"] == "submit_ack" and m["id"] == id:
                self.acks[id] = m["dp_rank"]
                return "consumed"
            if m["type"] == "submit_reject" and m["id"] == id:
                raise SubmitRejected(m)
            if m["type"] == "error" and m["id"] == id:
                raise ServerError(m)
            if m["type"] != "output":
                return None
            mine = [e for e in m["outputs"] if e["id"] == id]
            if not mine:
                return None
            m["outputs"] = [e for e in m["outputs"] if e["id"] != id]
            return mine

        i = 0
        while i < len(self._pending):
            got = extract(self._pending[i])
            if got is None:
                i += 1
                continue
            if (got == "consumed" or self._pending[i]["type"] == "handoff"
                    or not self._pending[i].get("outputs", True)):
                del self._pending[i]
            if got != "consumed":
                return got
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request %r: no output within %.3g s" % (id, timeout))
            m = self._recv_socket_message(left)
            if m is None:
                continue
            got = extract(m)
            if got == "consumed":
                continue
            if got is None:
                self._pending.append(m)
                continue
            if m["type"] == "output" and m["outputs"]:
                self._pending.append(m)  # the other requests' entries stay queued
            return got


# ------------------------------------------------------------------------------------------------
# Disaggregated prefill/decode: two hops


class DisaggregatedClient:
    """One request, two workers: a `mocker serve --worker-type prefill` computes the prompt and
    answers with a `handoff` ticket; a `--worker-type decode` worker takes the same submit plus
    that ticket, fetches the KV from the prefill worker and streams every output token
    (protocol/README.md; service/README.md "Disaggregated prefill/decode (live)").

        with DisaggregatedClient.connect(prefill.submit, prefill.cancel,
                                         decode.submit, decode.cancel) as c:
            tokens = list(c.generate("r1", prompt=[1, 2, 3, 4], max_tokens=8))
            c.terminal("r1")["finish"], c.ticket("r1")["transfer_ms"], c.timings("r1")

    Step by step (what generate() does): submit(id, ...) sends the prefill submit;
    wait_handoff(id) waits for its `handoff` (returns the ticket); submit_decode(id) sends the
    decode submit carrying the ticket unchanged; stream(id) yields the decode worker's tokens
    and returns its terminal entry. stream(id) runs the steps not yet done, so generate() is
    submit + stream.

    cancel(id) goes where the request is: to the prefill worker until the decode submit was sent
    (before or after the handoff), then to the decode worker (which releases the prefill
    worker's held KV itself). Both connections stay open for the client's lifetime: a prefill
    worker cancels the held requests of a client whose connection closes.

    Errors name the hop: SubmitRejected and ServerError carry `.hop` ("prefill" / "decode"); a
    decode submit_reject also cancels the request on the prefill worker (frees its held KV). A
    prefill worker that ends the request without a handoff (rejected by its scheduler,
    cancelled, error, shutdown) sends a normal terminal entry: stream() returns it as the
    request's terminal (and terminal_hop(id) is "prefill"); tokens from a prefill worker are a
    ProtocolError. Not thread-safe.
    """

    #: Stages of a request: "prefill" (submitted to the prefill worker), "handoff" (ticket
    #: received, decode submit not sent), "decode" (decode submit sent), "ended".
    STAGES = ("prefill", "handoff", "decode", "ended")

    def __init__(self, prefill, decode):
        """Takes two connected MockerClients (closed by close())."""
        self.prefill = prefill
        self.decode = decode
        self._requests = {}  # id -> dict(stage, submit args, ticket, times, terminal, hop)

    @classmethod
    def connect(cls, prefill_submit, prefill_cancel, decode_submit, decode_cancel, **kwargs):
        """Connects a MockerClient to each worker; `kwargs` (routing_id, curve keys, ...) go to
        both MockerClient.connect calls."""
        prefill = MockerClient.connect(prefill_submit, prefill_cancel, **kwargs)
        try:
            decode = MockerClient.connect(decode_submit, decode_cancel, **kwargs)
        except Exception:
            prefill.close()
            raise
        return cls(prefill, decode)

    def close(self):
        self.prefill.close()
        self.decode.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _state(self, id):
        try:
            return self._requests[id]
        except KeyError:
            raise KeyError("request %r was not submitted through this client" % id) from None

    def stage(self, id):
        """Where request `id` is: one of STAGES."""
        return self._state(id)["stage"]

    def ticket(self, id):
        """The handoff ticket (dict: source, key, source_rank, block_size, prompt_len,
        cached_tokens, transfer_ms), or None before the handoff."""
        return self._state(id)["ticket"]

    def terminal(self, id):
        """The request's terminal output entry (from the decode worker, or the prefill worker's
        when it ended there), or None."""
        return self._state(id)["terminal"]

    def terminal_hop(self, id):
        """"prefill" or "decode": which worker sent the terminal entry; None before it."""
        return self._state(id)["terminal_hop"]

    def timings(self, id):
        """Milliseconds since submit() of each step seen so far: prefill_ack, handoff,
        decode_submit, decode_ack, first_token, terminal (absent keys: not reached)."""
        st = self._state(id)
        t0 = st["times"]["submit"]
        return {k: (v - t0) * 1000.0 for k, v in st["times"].items() if k != "submit"}

    def generate(self, id, prompt, max_tokens, output_tokens=None, timeout=10.0):
        """submit() + stream(): a generator of the decode worker's output tokens; its return
        value is the terminal entry."""
        self.submit(id, prompt, max_tokens, output_tokens)
        return (yield from self.stream(id, timeout))

    def submit(self, id, prompt, max_tokens, output_tokens=None):
        """Sends the prefill submit (the decode submit repeats these arguments)."""
        prompt = _uint_list(prompt, "prompt")
        if output_tokens is not None:
            output_tokens = _uint_list(output_tokens, "output_tokens")
        self.prefill.submit(id, prompt, max_tokens, output_tokens)
        self._requests[id] = {"stage": "prefill", "prompt": prompt, "max_tokens": max_tokens,
                              "output_tokens": output_tokens, "ticket": None, "terminal": None,
                              "terminal_hop": None, "cancelled": False,
                              "times": {"submit": time.monotonic()}}

    @staticmethod
    def _cancelled_entry(id):
        return {"id": id, "index": 0, "tokens": [], "finish": "cancelled",
                "reason": "cancelled by the client after the handoff, before the decode submit",
                "cached_tokens": None}

    def _end(self, st, entry, hop):
        st["stage"] = "ended"
        st["terminal"] = entry
        st["terminal_hop"] = hop
        st["times"]["terminal"] = time.monotonic()
        return entry

    def wait_handoff(self, id, timeout=10.0):
        """Waits for the prefill worker's `handoff` for `id` and returns its ticket (dict);
        returns None when the prefill worker ended the request instead (its terminal entry is
        terminal(id)). Raises SubmitRejected / ServerError with hop "prefill", ProtocolError
        if the prefill worker sent output tokens, TimeoutError."""
        st = self._state(id)
        if st["stage"] != "prefill":
            return st["ticket"]
        try:
            while True:
                got = self.prefill._take_entries(id, timeout, handoff_ok=True)
                if "prefill_ack" not in st["times"] and id in self.prefill.acks:
                    st["times"]["prefill_ack"] = time.monotonic()
                for e in got:
                    if e.get("type") == "handoff":
                        st["ticket"] = e["ticket"]
                        st["times"]["handoff"] = time.monotonic()
                        if st["cancelled"]:
                            # Cancelled while the handoff was on its way: never decoded.
                            self._end(st, self._cancelled_entry(id), "prefill")
                            return None
                        st["stage"] = "handoff"
                        return e["ticket"]
                    if e["tokens"]:
                        raise ProtocolError("request %r: the prefill worker sent output tokens "
                                            "(is it a --worker-type prefill server?)" % id)
                    if e["finish"] is not None:
                        self._end(st, e, "prefill")
                        return None
        except SubmitRejected as e:
            self._end(st, None, "prefill")
            raise SubmitRejected(e.message, "prefill") from None
        except ServerError as e:
            self._end(st, None, "prefill")
            raise ServerError(e.message, "prefill") from None

    def submit_decode(self, id):
        """Sends the decode submit: the same id, prompt, max_tokens and output_tokens, plus the
        ticket unchanged. Requires the handoff (wait_handoff)."""
        st = self._state(id)
        if st["stage"] != "handoff":
            raise ValueError("request %r: no handoff to submit (stage %s)" % (id, st["stage"]))
        self.decode.submit(id, st["prompt"], st["max_tokens"], st["output_tokens"],
                           handoff=st["ticket"])
        st["stage"] = "decode"
        st["times"]["decode_submit"] = time.monotonic()

    def stream(self, id, timeout=10.0):
        """Yields the decode worker's output tokens of `id` until its terminal entry (the
        return value, also terminal(id)), doing the handoff steps not done yet. `timeout`
        bounds each wait. A request that ended on the prefill worker yields nothing and returns
        that worker's terminal entry."""
        st = self._state(id)
        if st["stage"] == "prefill":
            self.wait_handoff(id, timeout)
        if st["stage"] == "handoff":
            self.submit_decode(id)
        if st["stage"] == "ended":
            return st["terminal"]
        gen = self.decode.stream(id, timeout)
        try:
            while True:
                token = next(gen)
                if "decode_ack" not in st["times"]:
                    st["times"]["decode_ack"] = time.monotonic()
                st["times"].setdefault("first_token", time.monotonic())
                yield token
        except StopIteration as stop:
            if "decode_ack" not in st["times"] and id in self.decode.acks:
                st["times"]["decode_ack"] = time.monotonic()
            return self._end(st, stop.value, "decode")
        except SubmitRejected as e:
            # The prefill worker still holds the KV: release it now (its cancel_reply is left
            # for recv()), not at its hold timeout.
            self.prefill.cancel(id, wait=False)
            self._end(st, None, "decode")
            raise SubmitRejected(e.message, "decode") from None
        except ServerError as e:
            self._end(st, None, "decode")
            raise ServerError(e.message, "decode") from None

    def cancel(self, id, wait=True, timeout=5.0):
        """Cancels `id` on the worker that holds it now: the prefill worker until the decode
        submit was sent, the decode worker after. Returns "applied" / "not_found" (None with
        wait=False), and the hop in `last_cancel_hop`. A request cancelled before the decode
        submit is never submitted to the decode worker (stream() then returns the prefill
        worker's terminal, or a local `cancelled` terminal entry when the prefill worker had
        already handed it off)."""
        st = self._state(id)
        if st["stage"] in ("prefill", "handoff"):
            self.last_cancel_hop = "prefill"
            result = self.prefill.cancel(id, wait=wait, timeout=timeout)
            st["cancelled"] = True
            if st["stage"] == "handoff":
                # Handed off, never sent to a decode worker: nothing more comes for it.
                self._end(st, self._cancelled_entry(id), "prefill")
            return result
        self.last_cancel_hop = "decode"
        if st["stage"] == "ended" and st["terminal_hop"] == "prefill":
            self.last_cancel_hop = "prefill"
            return self.prefill.cancel(id, wait=wait, timeout=timeout)
        return self.decode.cancel(id, wait=wait, timeout=timeout)
