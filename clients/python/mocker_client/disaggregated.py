"""DisaggregatedClient: one request over two workers (prefill, then decode with the handoff
ticket).
"""

import time

from .client import MockerClient
from .wire import ProtocolError, ServerError, SubmitRejected, _uint_list


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
