"""Python client of `mocker serve` — client protocol v1 (protocol/README.md).

One package directory, no installation: it needs only python3-zmq and python3-msgpack (Debian's
/usr/bin/python3 has both). Copy the `mocker_client/` directory next to your script or put
clients/python on sys.path.

    from mocker_client import MockerClient

    with MockerClient.connect("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556") as c:
        c.submit("r1", prompt=[1, 2, 3, 4], max_tokens=8)
        tokens = list(c.stream("r1"))          # blocks until the terminal entry
        print(tokens, c.terminal("r1")["finish"])  # [...] length

Design
------
* Two DEALER sockets share one routing id: the *submit* socket (submit, stats, kv_snapshot,
  lora_load / lora_unload;
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

Modules: `wire` (constants, errors, validation and encoding; no sockets), `files` (the fleet file
and key files), `client` (MockerClient), `disaggregated` (DisaggregatedClient). Everything a
user needs is importable from the package itself.
"""

from .client import MockerClient
from .disaggregated import DisaggregatedClient
from .files import FLEET_FILE_VERSION, Fleet, FleetRank, FleetWorker, load_fleet, read_key_file
from .wire import (CANCEL_RESULTS, ERROR_CODES, FINISH_REASONS, HANDOFF_KEY_BYTES, LORA_OPS,
                   MAX_ID_BYTES, MAX_LORA_NAME_BYTES, MAX_MESSAGE_BYTES, PROTOCOL_VERSION,
                   SERVICE_TYPES, HandedOff, LoraRefused, MockerError, ProtocolError, ServerError,
                   SubmitRejected, decode_message, encode_message)

__all__ = [
    "CANCEL_RESULTS", "ERROR_CODES", "FINISH_REASONS", "FLEET_FILE_VERSION", "HANDOFF_KEY_BYTES",
    "LORA_OPS", "MAX_ID_BYTES", "MAX_LORA_NAME_BYTES", "MAX_MESSAGE_BYTES", "LoraRefused",
    "PROTOCOL_VERSION", "SERVICE_TYPES", "DisaggregatedClient",
    "Fleet", "FleetRank", "FleetWorker", "HandedOff", "MockerClient", "MockerError",
    "ProtocolError", "ServerError", "SubmitRejected", "decode_message", "encode_message",
    "load_fleet", "read_key_file",
]
