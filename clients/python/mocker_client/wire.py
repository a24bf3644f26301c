"""Client protocol v1 on the wire (protocol/README.md): constants, errors, the strict validation of
every service-to-client message, and encoding of client-to-service messages. No sockets.
"""

import msgpack

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
                           "stats_reply", "kv_snapshot_reply", "handoff", "lora_reply"})
#: lora_reply `op`s; its `result` is "ok" or one of ERROR_CODES.
LORA_OPS = frozenset({"load", "unload"})
#: Longest LoRA adapter name (bytes of UTF-8).
MAX_LORA_NAME_BYTES = 256
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


class LoraRefused(MockerError):
    """The service refused a lora_load / lora_unload (the `lora_reply` dict is in `.message`)."""

    def __init__(self, message):
        super().__init__("lora_%s %r refused: %s: %s" % (message["op"], message["name"],
                                                         message["result"], message["message"]))
        self.message = message


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


def _check_bool(value, where):
    if type(value) is not bool:
        raise ProtocolError("%s: expected bool, got %s" % (where, _type_name(value)))
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
    elif t == "lora_reply":
        _field(m, "op", "", _check_enum, LORA_OPS)
        _field(m, "name", "", _check_str, MAX_LORA_NAME_BYTES)
        if not m["name"]:
            raise ProtocolError("name: empty")
        _field(m, "result", "", _check_enum, ERROR_CODES | {"ok"})
        changed = _field(m, "changed", "", _check_bool)
        if changed and m["result"] != "ok":
            raise ProtocolError("changed: true with result %r" % m["result"])
        _field(m, "message", "", _check_str, optional=True)
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
