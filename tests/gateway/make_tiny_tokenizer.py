"""Writes tests/data/tiny_tokenizer.json: a small Hugging Face byte-level BPE tokenizer
(the layout Qwen 2 and Llama 3 ship: a Split pre-tokenizer with the Llama 3 / Qwen regex, then
ByteLevel without its own regex; ByteLevel decoder; added special tokens), trained here on the
text below by plain BPE (the most frequent adjacent pair merges first; ties broken by the pair's
text) — 256 byte tokens, MERGES merges, 3 added tokens.

Licence and provenance: the training text was written for this project and the generated file is
dedicated to the public domain (CC0 1.0); no third-party vocabulary or text is in it.

    /usr/bin/python3 tests/gateway/make_tiny_tokenizer.py > tests/data/tiny_tokenizer.json
"""

import collections
import json
import re
import sys

MERGES = 400

# The pre-tokenizer regex of Llama 3 and Qwen 2 (tokenizer.json "Split" pattern).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The same on ASCII text for Python's `re` (the training text is ASCII): enough to count pairs.
TRAIN_REGEX = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\r\na-zA-Z0-9]?[a-zA-Z]+|[0-9]{1,3}|"
                         r" ?[^\sa-zA-Z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+", re.IGNORECASE)

TEXT = """
The gateway takes requests from clients that speak the OpenAI protocol and turns every prompt
into token ids for the workers behind it. A worker simulates an inference engine: it schedules
requests in passes, keeps a paged cache of key and value blocks, and streams the generated
tokens back as they are produced. When two prompts share their first words, they share their
first blocks, and the second request finds those blocks in the cache of the worker that served
the first one. The router of the gateway can use that: it asks an index which worker holds the
longest prefix of the prompt, weighs that against the load of each worker, and sends the
request where the cost is lowest. Prefill workers compute the prompt and hand the request off;
decode workers fetch the blocks and generate the rest of the answer, one token per pass.
Clients count tokens too. They measure the time to the first token, the time between tokens,
and the throughput of the whole run, and they compare the numbers with those of a real server
running on real hardware. For those numbers to mean anything the token counts must agree: the
text the gateway returns must tokenize to exactly the number of tokens it reports in the usage
of the response. The quick brown fox jumps over the lazy dog; then it rests in the shade of the
old tree near the river, where the water is cold and clear in the morning and warm at night.
Numbers such as 12, 345, 6789 and 2026 appear in logs, as do words like can't, won't, it's,
we're, they've, I'm, you'll and he'd. Every line ends with a newline, and some lines end twice.

"""


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the ByteLevel alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    byte_map = bytes_to_unicode()
    words = collections.Counter()
    for piece in TRAIN_REGEX.findall(TEXT):
        words[tuple(byte_map[b] for b in piece.encode("utf-8"))] += 1
    vocab = {byte_map[b]: b for b in range(256)}
    merges = []
    while len(merges) < MERGES:
        pairs = collections.Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merged = best[0] + best[1]
        merges.append(best)
        vocab.setdefault(merged, len(vocab))
        new_words = collections.Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += n
        words = new_words
    added = []
    for content in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        added.append({"id": len(vocab) + len(added), "content": content, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                           "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }
    json.dump(tokenizer, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
