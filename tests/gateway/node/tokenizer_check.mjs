// Independent cross-check of `mocker gateway --tokenizer`: Hugging Face's own JavaScript
// implementation of tokenizer.json (@huggingface/tokenizers, npm) encodes each text given on
// stdin (a JSON list of strings) with the tokenizer file named by argv[2], and prints one JSON
// list of token-id lists (no special tokens added: the shipped test tokenizer adds none).
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const tokenizer = new Tokenizer(JSON.parse(readFileSync(process.argv[2], "utf8")), {});
const texts = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(texts.map((t) => tokenizer.encode(t).ids)) + "\n");
