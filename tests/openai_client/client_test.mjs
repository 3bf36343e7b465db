// The official OpenAI client library (npm `openai`) against a running `tediserve serve`:
// completions, chat, and streaming chat with usage. Usage: node client_test.mjs PORT.
// Exits non-zero with a message on the first mismatch.
import OpenAI from "openai";

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused" });
const fail = (m) => { console.error(`FAIL: ${m}`); process.exit(1); };

const models = await client.models.list();
const model = models.data[0]?.id;
if (model !== "tiny-llada") fail(`models.list gave ${JSON.stringify(models.data)}`);

const c = await client.completions.create({ model, prompt: "977-724=", max_tokens: 8, slo_ms: 10000 });
if (c.choices[0].text !== "253") fail(`completion text ${JSON.stringify(c.choices[0].text)}`);
if (c.usage.completion_tokens !== 3) fail(`completion usage ${JSON.stringify(c.usage)}`);
if (!(c.tediserve.steps >= 1)) fail("no tediserve.steps in the completion");

const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "cpy:nrsp=" }], slo_ms: 10000 });
if (chat.choices[0].message.content !== "nrsp") fail(`chat content ${JSON.stringify(chat.choices[0].message)}`);
if (chat.choices[0].finish_reason !== "stop") fail("chat finish_reason");

const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "cpy:nrsp=" }], stream: true,
  stream_options: { include_usage: true }, slo_ms: 10000 });
let text = "", usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const ch of chunk.choices) {
    text += ch.delta?.content ?? "";
    finish = ch.finish_reason ?? finish;
  }
}
if (text !== "nrsp") fail(`streamed ${JSON.stringify(text)}`);
if (finish !== "stop" || !usage || usage.completion_tokens !== 4) fail(`stream end ${finish} ${JSON.stringify(usage)}`);

try {
  await client.completions.create({ model, prompt: "1+1=", n: 2 });
  fail("n: 2 was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.BadRequestError) || e.param !== "n") fail(`n: 2 gave ${e}`);
}
console.log("openai client: models, completion, chat, streaming chat, error: ok");
