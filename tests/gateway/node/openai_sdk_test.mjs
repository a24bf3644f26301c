// The official `openai` Node SDK against a running `mocker gateway` (driven by
// tests/gateway/gateway_live_test.py, which starts the workers and the gateway and checks the
// workers' side). Usage: node openai_sdk_test.mjs BASE_URL. Prints one JSON line per step on
// stdout; on the "aborted" line the client has aborted a running stream (the Python side then
// waits for the worker to cancel it); exits non-zero with a message on any failure.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "unused", maxRetries: 0 });
const report = (step, data) => console.log(JSON.stringify({ step, ...data }));
const check = (cond, what) => {
  if (!cond) throw new Error("check failed: " + what);
};

const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === "mocker", "one model named mocker");
report("models", { ids: models.data.map((m) => m.id) });

const completion = await client.completions.create({
  model: "mocker", prompt: "Hello from Node", max_tokens: 6, ignore_eos: true,
});
check(completion.object === "text_completion", "completion object");
check(completion.usage.completion_tokens === 6, "6 completion tokens");
report("completion", { text: completion.choices[0].text, usage: completion.usage,
                       finish_reason: completion.choices[0].finish_reason });

const chat = await client.chat.completions.create({
  model: "mocker", messages: [{ role: "user", content: "Hi" }], max_completion_tokens: 3,
  ignore_eos: true,
});
check(chat.choices[0].message.role === "assistant", "assistant message");
report("chat", { content: chat.choices[0].message.content, usage: chat.usage });

const stream = await client.chat.completions.create({
  model: "mocker", messages: [{ role: "user", content: "Stream please" }], max_tokens: 5,
  ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
let text = "";
let usage = null;
let finish = null;
for await (const chunk of stream) {
  if (chunk.choices.length > 0) {
    text += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(usage && usage.completion_tokens === 5, "usage chunk with 5 completion tokens");
check(finish === "length", "finish_reason length");
report("chat_stream", { text, usage, finish_reason: finish });

// A long stream aborted after its first chunk: the gateway must cancel it on the worker.
const controller = new AbortController();
const long = await client.completions.create(
  { model: "mocker", prompt: "a long story", max_tokens: 8000, ignore_eos: true, stream: true },
  { signal: controller.signal });
let chunks = 0;
try {
  for await (const chunk of long) {
    chunks += chunk.choices.length;
    if (chunks === 1) controller.abort();
  }
} catch (e) {
  check(e.name === "AbortError" || e.constructor.name === "APIUserAbortError", "abort: " + e);
}
report("aborted", { chunks });
