// The gateway routing by an engine's own token ids (tokenizer kind
// huggingface), end to end on loopback in front of mock engines: the prefix
// index holds the ids the reference (Python jinja2 + Rust tokenizers) gives,
// a conversation's next turn follows its prefix, and a request the chat
// template refuses is answered 400 with the template's message, as the engine
// would answer it, without reaching an engine.
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, loadTokenizer, Utf8ByteTokenizer, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import mistralReference from "../fixtures/tokenizers/mistral-v1/reference.json" with { type: "json" };
import qwenReference from "../fixtures/tokenizers/qwen2.5/reference.json" with { type: "json" };

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** `n` engines and a gateway routing by the Hugging Face tokenizer in `family`'s fixture folder. */
async function fleet(n: number, family: string): Promise<{ gateway: Gateway; engines: MockEngine[] }> {
  const engines: MockEngine[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startMockEngine(`e${i}`);
    open.push(e);
    engines.push(e);
  }
  const dir = path.resolve("test/fixtures/tokenizers", family);
  const text = `listen: { port: 0 }\nlogging: { level: silent }\ntokenizer: { kind: huggingface, path: ${dir} }\nupstreams:\n${engines.map((e) => `  - ${e.url}\n`).join("")}`;
  const config = loadGatewayConfig({ file: { name: "gateway.yaml", text } });
  const gateway = await createGateway(config, { tokenizer: loadTokenizer(config.tokenizer) });
  open.push(gateway);
  return { gateway, engines };
}

async function post(gateway: Gateway, body: unknown, route = "/v1/chat/completions") {
  const response = await fetch(`${gateway.url}${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: response.status, upstream: response.headers.get("x-adp-upstream"), body: (await response.json()) as Record<string, unknown> };
}

/** A reference case by name. */
const reference = (cases: typeof qwenReference.cases, name: string) => cases.find((c) => c.name === name)!;

describe("gateway with an engine's tokenizer", () => {
  it("learns the engine's ids (not bytes) and routes a conversation's next turn to where its prefix is", async () => {
    const { gateway } = await fleet(4, "qwen2.5");
    const long = reference(qwenReference.cases, "chat: long multi-turn");
    const next = reference(qwenReference.cases, "chat: long multi-turn, next turn");
    const first = await post(gateway, { model: "m", ...long.request });
    expect(first.status).toBe(200);
    const index = gateway.router.prefixIndex!;
    // The index holds the reference ids, block by block (32 tokens), on the upstream the request went to.
    const learned = index.match(Uint32Array.from(long.ids!.slice(0, -1)));
    expect(learned[Number(first.upstream)]).toBe(Math.floor((long.ids!.length - 1) / 32) * 32);
    const bytes = new Utf8ByteTokenizer().encodeChat(long.request.messages as { role: string; content: string }[]);
    expect(Math.max(...index.match(bytes))).toBe(0);
    for (let i = 0; i < 3; i++) expect((await post(gateway, { model: "m", ...next.request })).upstream).toBe(first.upstream);
    // A completion routes by its own ids too.
    const completion = reference(qwenReference.cases, "completion: long");
    expect((await post(gateway, { model: "m", ...completion.request }, "/v1/completions")).status).toBe(200);
    expect(Math.max(...index.match(Uint32Array.from(completion.ids!.slice(0, -1))))).toBe(Math.floor((completion.ids!.length - 1) / 32) * 32);
    const metrics = gateway.metrics();
    const placed = [...metrics.matchAll(/^adp_gateway_upstream_prompt_tokens_total\{upstream="[^"]+"\} (\d+)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0);
    expect(placed).toBe(long.ids!.length + 3 * next.ids!.length + completion.ids!.length);
  });

  it("tools in the body reach the template", async () => {
    const { gateway } = await fleet(1, "qwen2.5");
    const c = reference(qwenReference.cases, "chat: tools given");
    expect((await post(gateway, { model: "m", ...c.request })).status).toBe(200);
    expect(Math.max(...gateway.router.prefixIndex!.match(Uint32Array.from(c.ids!.slice(0, -1))))).toBe(Math.floor((c.ids!.length - 1) / 32) * 32);
  });

  it("a request the chat template refuses: 400 with the template's message, no engine asked", async () => {
    const { gateway, engines } = await fleet(2, "mistral-v1");
    const c = mistralReference.cases.find((x) => x.name === "chat: roles out of order")!;
    const r = await post(gateway, { model: "m", ...c.request });
    expect(r.status).toBe(400);
    expect((r.body.error as { message: string }).message).toBe(c.error);
    expect(engines.every((e) => e.received.every((q) => !q.path.endsWith("completions")))).toBe(true);
    const bad = await post(gateway, { model: "m", messages: [{ role: "user", content: "hi" }], tools: "all" });
    expect(bad.status).toBe(400);
    expect((bad.body.error as { message: string }).message).toBe("tools must be a list");
  });
});
