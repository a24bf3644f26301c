"""MockerClient: one connection to a `mocker serve` worker (two DEALER sockets sharing one routing
id; see the package's docstring for the design).
"""

import collections
import os
import time

import zmq

from .wire import (MAX_ID_BYTES, MAX_LORA_NAME_BYTES, MAX_MESSAGE_BYTES, HandedOff, LoraRefused,
                   ProtocolError, ServerError, SubmitRejected, _uint_list, decode_message,
                   encode_message)


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

    def lora_load(self, name, timeout=5.0):
        """Makes LoRA adapter `name` resident on every rank now (vLLM's add_lora). Returns True
        if some rank loaded it (it was not resident there: that rank spends lora_load_ms on it
        before its next pass), False if it was resident everywhere. A refusal (LoRA off, a name
        the engine refuses) raises LoraRefused."""
        return self._lora("load", name, timeout)

    def lora_unload(self, name, timeout=5.0):
        """Drops LoRA adapter `name` from every rank's resident adapters (vLLM's remove_lora;
        requests of it that run or wait load it again). Returns True if some rank held it. A
        refusal raises LoraRefused."""
        return self._lora("unload", name, timeout)

    def _lora(self, op, name, timeout):
        if not isinstance(name, str) or not 1 <= len(name.encode()) <= MAX_LORA_NAME_BYTES:
            raise ValueError("name: expected a str of 1..%d bytes" % MAX_LORA_NAME_BYTES)
        self._submit.send(encode_message("lora_" + op, name=name))
        reply = self._wait_for(
            lambda m: m["type"] == "lora_reply" and m["op"] == op and m["name"] == name, timeout,
            "lora_reply for %s %r" % (op, name), anonymous_errors=True)
        if reply["result"] != "ok":
            raise LoraRefused(reply)
        return reply["changed"]

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
