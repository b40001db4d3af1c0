// The gateway's configuration as code and at runtime: createGateway with a
// plain object shaped like the YAML file, client and admin keys of any length
// (short ones warned about, never printed), the admin endpoint adding and
// removing upstreams through the reload path, OpenAI error codes that are
// always strings, batch prompts, the request log line, and the shipped JSON
// Schema (self-contained, every $ref local, the example file valid).
import { readFileSync } from "node:fs";
import { pino } from "pino";
import { parse } from "yaml";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, gatewayConfigSchema, GatewayConfigError, isGatewayConfig, loadGatewayConfig, type Gateway, type StateEntry } from "../../gateway/src/index.js";
import { attentionDpConfigSchema } from "../../src/config.js";
import { startEngines, type EngineBehaviour } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** `n` mock engines, closed after each test. */
const engines = (n: number, behaviour: EngineBehaviour = {}) => startEngines(n, open, behaviour);

async function start(config: Parameters<typeof createGateway>[0], options: Parameters<typeof createGateway>[1] = {}): Promise<{ gateway: Gateway; logs: Record<string, unknown>[]; raw: string[] }> {
  const logs: Record<string, unknown>[] = [];
  const raw: string[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void (raw.push(line), logs.push(JSON.parse(line) as Record<string, unknown>)) });
  const gateway = await createGateway(isGatewayConfig(config) ? config : { listen: { port: 0 }, ...config }, { logger, ...options });
  open.push(gateway);
  return { gateway, logs, raw };
}

/** Which engine answered a session's turn (by the body the mock writes). */
async function engineOf(gateway: Gateway, session: string): Promise<string> {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `hi ${session}` }] }) });
  expect(response.status).toBe(200);
  return ((await response.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content.replace("hello from ", "");
}

describe("createGateway(config) with a plain object", () => {
  it("takes the YAML file's shape (upstreams as URLs or entries), checked by the same rules; a loaded configuration too", async () => {
    const [e0, e1] = await engines(2);
    const { gateway } = await start({ upstreams: [{ url: e0!.url, name: "first" }, e1!.url], listen: { port: 0 }, policy: "conversation", limits: { queue_size: 7 } });
    expect(gateway.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(gateway.metrics()).toMatch(/adp_gateway_upstream_info\{upstream="first",index="0",url="[^"]+"\} 1/);
    expect(["e0", "e1"]).toContain(await engineOf(gateway, "s"));
    // `port` / `host` at the top, as the flags: a shorthand of listen.
    const short = await createGateway({ upstreams: [e0!.url], port: 0, host: "127.0.0.1", logging: { level: "silent" } });
    open.push(short);
    expect(await engineOf(short, "u")).toBe("e0");
    const { gateway: loaded } = await start(loadGatewayConfig({ flags: { upstreams: [e0!.url], port: 0 } }));
    expect(await engineOf(loaded, "t")).toBe("e0");
    const refusal = await createGateway({ upstreams: [{ url: "http://127.0.0.1:1", nmae: "x" } as never], listen: { port: 70000 } }).catch((e: unknown) => e);
    expect(refusal).toBeInstanceOf(GatewayConfigError);
    expect((refusal as GatewayConfigError).issues.map((i) => i.field)).toEqual(["listen.port", "upstreams[0].nmae"]);
    // reload() takes the object form as well.
    expect(await gateway.reload({ upstreams: [e1!.url], listen: { port: 0 }, policy: "conversation", limits: { queue_size: 7 } })).toMatchObject({ removed: [e0!.url], kept: [{ url: e1!.url, from: 1, to: 0 }], needRestart: [] });
  });
});

describe("keys", () => {
  it("client and admin keys of any non-empty length are accepted; short ones are warned about once at start, never printed", async () => {
    const [e0] = await engines(1);
    const { gateway, logs, raw } = await start({ upstreams: [e0!.url], auth: { api_keys: ["abc", "a-long-enough-client-key"], admin_api_key: "adm" } });
    const warnings = logs.filter((l) => l.level === 40).map((l) => String(l.msg));
    expect(warnings.filter((w) => w.includes("client API key"))).toHaveLength(1);
    expect(warnings.filter((w) => w.includes("admin API key"))).toHaveLength(1);
    expect(raw.join("").includes('"abc"') || raw.join("").includes("adm\"")).toBe(false);
    const ask = (key: string) => fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    expect((await ask("abc")).status).toBe(200);
    expect((await ask("a-long-enough-client-key")).status).toBe(200);
    expect((await ask("abd")).status).toBe(401);
    expect((await fetch(`${gateway.url}/admin/upstreams`, { headers: { authorization: "Bearer adm" } })).status).toBe(200);
    expect((await fetch(`${gateway.url}/admin/upstreams`, { headers: { authorization: "Bearer abc" } })).status).toBe(401);
    // From the environment: comma-separated client keys, and the admin key.
    const fromEnv = loadGatewayConfig({ object: { upstreams: [e0!.url], auth: { api_keys_env: "KEYS", admin_api_key_env: "ADMIN" } }, env: { KEYS: "k1, k2", ADMIN: "x" } });
    expect(fromEnv.auth).toMatchObject({ apiKeys: ["k1", "k2"], adminApiKey: "x" });
    expect(() => loadGatewayConfig({ object: { upstreams: [e0!.url], auth: { admin_api_key: "a", admin_api_key_env: "ADMIN" } }, env: { ADMIN: "x" } })).toThrow(/admin_api_key or admin_api_key_env, not both/);
    expect(() => loadGatewayConfig({ object: { upstreams: [e0!.url], auth: { admin_api_key: " " } } })).toThrow(/auth\.admin_api_key: must be a non-empty string \(a key; got an empty string/);
    // A key's value is never in a message, even a key YAML read as a number.
    const numeric = (() => {
      try {
        loadGatewayConfig({ object: { upstreams: [{ url: e0!.url, api_key: 98765432101234 as never }], auth: { admin_api_key: 12345678987654 as never } } });
      } catch (error) {
        return (error as Error).message;
      }
      return "";
    })();
    expect(numeric).toContain("a number-like key must be quoted");
    expect(numeric).not.toMatch(/98765432101234|12345678987654/);
    // Admin stays off unless a key is set.
    const { gateway: off } = await start({ upstreams: [e0!.url] });
    expect((await fetch(`${off.url}/admin/upstreams`)).status).toBe(404);
  });

  it("protect_metrics or protect_health without client keys is warned about at start", async () => {
    const [e0] = await engines(1);
    const { logs } = await start({ upstreams: [e0!.url], auth: { protect_metrics: true } });
    expect(logs.some((l) => l.level === 40 && String(l.msg).includes("protect nothing"))).toBe(true);
    const { logs: quiet } = await start({ upstreams: [e0!.url], auth: { protect_metrics: true, api_keys: ["a-long-enough-client-key"] } });
    expect(quiet.some((l) => String(l.msg).includes("protect nothing"))).toBe(false);
  });
});

describe("admin: adding and removing upstreams", () => {
  const ADMIN = "an-admin-key-of-length";
  const auth = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" };

  it("POST /admin/upstreams of an upstream nobody can connect to adds it unhealthy, as a reload does, and says why", async () => {
    const [e0] = await engines(1);
    const { gateway } = await start({ upstreams: [e0!.url], auth: { admin_api_key: ADMIN } });
    const { freePort } = await import("../support/processes.js");
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    const added = await fetch(`${gateway.url}/admin/upstreams`, { method: "POST", headers: auth, body: JSON.stringify({ url: nowhere, name: "nowhere" }) });
    expect(added.status).toBe(201);
    expect(((await added.json()) as { unreachable?: string }).unreachable).toContain("ECONNREFUSED");
    const health = ((await (await fetch(`${gateway.url}/health`)).json()) as { upstreams: { name: string; healthy: boolean }[] }).upstreams;
    expect(health.find((u) => u.name === "nowhere")?.healthy).toBe(false);
  });

  it("POST /admin/upstreams adds one (201, its index), DELETE /admin/upstreams/{index} removes one; both as a reload does, the others keeping their state", async () => {
    const [e0, e1, e2] = await engines(3, { chunks: 4, chunkGapMs: 150 });
    const log: StateEntry[] = [];
    const { gateway } = await start({ upstreams: [e0!.url, e1!.url], policy: "conversation", auth: { admin_api_key: ADMIN } }, { stateLog: { append: (e) => void log.push(e) } });
    const where = new Map<string, string>();
    for (let i = 0; i < 8; i++) where.set(`c${i}`, await engineOf(gateway, `c${i}`));
    // Add e2.
    const added = await fetch(`${gateway.url}/admin/upstreams`, { method: "POST", headers: auth, body: JSON.stringify({ url: `${e2!.url}/`, name: "third", api_key: "engine-key" }) });
    expect(added.status).toBe(201);
    const body = (await added.json()) as { index: number; upstreams: { index: number; name: string; url: string }[] };
    expect(body.index).toBe(2);
    expect(body.upstreams.map((u) => u.name)).toEqual([new URL(e0!.url).host, new URL(e1!.url).host, "third"]);
    expect(log.filter((e) => e.op === "ranks").at(-1)).toMatchObject({ op: "ranks", ranks: [0, 1, null] });
    for (const [session, engine] of where) expect(await engineOf(gateway, session)).toBe(engine); // conversations kept
    const spread = new Set<string>();
    for (let i = 0; i < 12; i++) spread.add(await engineOf(gateway, `n${i}`));
    expect(spread.has("e2")).toBe(true);
    expect(e2!.received.find((r) => r.path === "/v1/chat/completions")!.headers.authorization).toBe("Bearer engine-key");
    // Remove e0 while it streams: the stream finishes; its conversations move; e1's and e2's stay.
    const session = [...where].find(([, e]) => e === "e0")?.[0];
    expect(session).toBeDefined();
    const streaming = fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session! }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "long" }] }) });
    await new Promise((r) => setTimeout(r, 100));
    const removed = await fetch(`${gateway.url}/admin/upstreams/0`, { method: "DELETE", headers: auth });
    expect(removed.status).toBe(200);
    expect(((await removed.json()) as { removed: { url: string } }).removed.url).toBe(e0!.url);
    expect(log.filter((e) => e.op === "ranks").at(-1)).toMatchObject({ op: "ranks", ranks: [1, 2] });
    const stream = await streaming;
    expect(stream.headers.get("x-adp-upstream")).toBe("0");
    expect(await stream.text()).toContain("data: [DONE]");
    for (const [s, engine] of where) expect(await engineOf(gateway, s)).toEqual(engine === "e0" ? expect.not.stringMatching(/^e0$/) : engine);
    expect(((await (await fetch(`${gateway.url}/admin/upstreams`, { headers: auth })).json()) as { upstreams: { url: string }[] }).upstreams.map((u) => u.url)).toEqual([e1!.url, e2!.url]);
  });

  it("refuses what the file would refuse (400, OpenAI error shape), a URL already there (409), a missing index (404), the last upstream (409)", async () => {
    const [e0] = await engines(1);
    const { gateway } = await start({ upstreams: [e0!.url], auth: { admin_api_key: ADMIN } });
    const add = (body: string) => fetch(`${gateway.url}/admin/upstreams`, { method: "POST", headers: auth, body });
    const error = async (r: Response) => ({ status: r.status, ...((await r.json()) as { error: { code: string; type: string; message: string } }).error });
    expect(await error(await add(JSON.stringify({ url: "localhost:8001" })))).toMatchObject({ status: 400, code: "invalid_value", type: "invalid_request_error", message: expect.stringContaining("has no scheme") });
    expect(await error(await add(JSON.stringify({ name: "x" })))).toMatchObject({ status: 400, code: "missing_field" });
    expect(await error(await add(JSON.stringify({ url: "http://127.0.0.1:1", colour: "red" })))).toMatchObject({ status: 400, message: expect.stringContaining("colour: is not a setting here") });
    expect(await error(await add("{nope"))).toMatchObject({ status: 400, code: "invalid_json" });
    expect(await error(await add(JSON.stringify({ url: e0!.url })))).toMatchObject({ status: 409, code: "upstream_exists" });
    expect(await error(await fetch(`${gateway.url}/admin/upstreams/5`, { method: "DELETE", headers: auth }))).toMatchObject({ status: 404, code: "not_found" });
    expect(await error(await fetch(`${gateway.url}/admin/upstreams/0`, { method: "DELETE", headers: auth }))).toMatchObject({ status: 409, code: "last_upstream" });
    expect((await fetch(`${gateway.url}/admin/upstreams`, { method: "POST", body: "{}" })).status).toBe(401);
    expect(await error(await fetch(`${gateway.url}/admin/upstreams`, { method: "PUT", headers: auth }))).toMatchObject({ status: 405, code: "method_not_allowed" });
    // The admin key does not reach the gateway's environment, nor open connections the file did not configure.
    process.env.ADP_TEST_SECRET = "must-not-leave";
    for (const field of ["api_key_env", "kv_events", "load"]) {
      const value = field === "api_key_env" ? "ADP_TEST_SECRET" : { kind: field === "load" ? "vllm" : "http" };
      expect(await error(await add(JSON.stringify({ url: "http://127.0.0.1:1", [field]: value })))).toMatchObject({ status: 400, code: "invalid_value", message: expect.stringContaining(`${field}: not accepted here`) });
    }
    delete process.env.ADP_TEST_SECRET;
  });

  it("two additions at once both stay (the fleet is read after each body arrives); a removal names its URL so a retry cannot remove another", async () => {
    const [e0, e1, e2] = await engines(3);
    const { gateway } = await start({ upstreams: [e0!.url], auth: { admin_api_key: ADMIN } });
    // A slow POST (its body trickles in) and a quick one, at once.
    const slow = (async () => {
      const { request } = await import("node:http");
      const url = new URL(`${gateway.url}/admin/upstreams`);
      const body = JSON.stringify({ url: e1!.url });
      return new Promise<number>((resolve, reject) => {
        const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers: { ...auth, "content-length": String(body.length) } }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        });
        req.on("error", reject);
        req.write(body.slice(0, 5));
        setTimeout(() => req.end(body.slice(5)), 300);
      });
    })();
    await new Promise((r) => setTimeout(r, 50));
    const quick = await fetch(`${gateway.url}/admin/upstreams`, { method: "POST", headers: auth, body: JSON.stringify({ url: e2!.url }) });
    expect([quick.status, await slow]).toEqual([201, 201]);
    const urls = async () => ((await (await fetch(`${gateway.url}/admin/upstreams`, { headers: auth })).json()) as { upstreams: { url: string }[] }).upstreams.map((u) => u.url);
    expect(await urls()).toEqual([e0!.url, e2!.url, e1!.url]);
    // DELETE with the URL it means: a mismatch (the index now names another upstream) is refused.
    const mismatch = await fetch(`${gateway.url}/admin/upstreams/1?url=${encodeURIComponent(e1!.url)}`, { method: "DELETE", headers: auth });
    expect(mismatch.status).toBe(409);
    expect(((await mismatch.json()) as { error: { code: string } }).error.code).toBe("upstream_mismatch");
    expect((await fetch(`${gateway.url}/admin/upstreams/2?url=${encodeURIComponent(e1!.url)}`, { method: "DELETE", headers: auth })).status).toBe(200);
    expect(await urls()).toEqual([e0!.url, e2!.url]);
  });
});

describe("bad requests and log lines", () => {
  it("every error body's code is a string; batch prompts are routed on their first prompt; log lines carry latency_ms", async () => {
    const [e0] = await engines(1);
    const { gateway, logs } = await start({ upstreams: [e0!.url], limits: { max_body_bytes: 2048 } });
    const send = (body: string, path = "/v1/completions", method = "POST") => fetch(`${gateway.url}${path}`, { method, headers: { "content-type": "application/json" }, ...(method === "POST" ? { body } : {}) });
    const cases: [Promise<Response>, number, string][] = [
      [send("{nope"), 400, "invalid_json"],
      [send("null"), 400, "invalid_request"],
      [send("[1]"), 400, "invalid_request"],
      [send(JSON.stringify({ prompt: "x" })), 400, "missing_field"],
      [send(JSON.stringify({ model: "m" })), 400, "missing_field"],
      [send(JSON.stringify({ model: "m" }), "/v1/chat/completions"), 400, "missing_field"],
      [send(JSON.stringify({ model: 3, prompt: "x" })), 400, "invalid_value"],
      [send(JSON.stringify({ model: "m", prompt: "x".repeat(4096) })), 413, "payload_too_large"],
      [send("", "/v1/completions", "GET"), 405, "method_not_allowed"],
      [send("", "/nowhere", "GET"), 404, "not_found"],
    ];
    for (const [pending, status, code] of cases) {
      const r = await pending;
      expect(r.status).toBe(status);
      const error = ((await r.json()) as { error: { code: unknown; type: unknown; message: unknown } }).error;
      expect(error).toMatchObject({ code, type: "invalid_request_error", message: expect.any(String) });
    }
    // OpenAI's batch forms: a list of strings, a list of token-id lists.
    for (const prompt of [["first prompt", "second prompt"], [[1, 2, 3], [4, 5]], [1, 2, 3]]) {
      expect((await send(JSON.stringify({ model: "m", prompt }))).status).toBe(200);
    }
    expect((await send(JSON.stringify({ model: "m", prompt: [[1, 2], "x"] }))).status).toBe(400);
    expect((await send(JSON.stringify({ model: "m", prompt: [[]] }))).status).toBe(400);
    const lines = logs.filter((l) => l.msg === "request");
    expect(lines.length).toBeGreaterThanOrEqual(cases.length);
    for (const l of lines) expect(typeof l.latency_ms).toBe("number");
    expect(lines.filter((l) => l.status === 200).every((l) => l.upstream === new URL(e0!.url).host)).toBe(true); // its name
  });

  it("a batch routes as its first prompt alone: it matches the prefix the first prompt left", async () => {
    const [e0] = await engines(1);
    const { gateway, logs } = await start({ upstreams: [e0!.url] });
    const prompt = "shared system text ".repeat(40);
    const send = (p: unknown) => fetch(`${gateway.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: p }) });
    await send(prompt);
    await send([prompt, "something else entirely"]);
    const [, batch] = logs.filter((l) => l.msg === "request");
    // All of the first prompt's full blocks were held (128-byte blocks; the last partial one is not).
    expect(batch!.matched_tokens).toBe(Math.floor((prompt.length - 1) / 128) * 128);
  });
});

/** Every `$ref` in `node`, with where it is. */
function refs(node: unknown, at = "#"): { ref: string; at: string }[] {
  if (typeof node !== "object" || node === null) return [];
  const own = "$ref" in node && typeof (node as { $ref: unknown }).$ref === "string" ? [{ ref: (node as { $ref: string }).$ref, at }] : [];
  return [...own, ...Object.entries(node).flatMap(([k, v]) => refs(v, `${at}/${k}`))];
}

/** Resolves a local JSON pointer (`#/…`) in `root`. */
function resolve(root: unknown, pointer: string): unknown {
  let node: unknown = root;
  for (const part of pointer.replace(/^#\/?/, "").split("/").filter((p) => p !== "")) {
    const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof node !== "object" || node === null || !(key in node)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

/** A structural check of `value` against the draft 2020-12 keywords the schema uses; returns the problems. */
function validate(schema: Record<string, unknown>, value: unknown, root: Record<string, unknown>, at = "$"): string[] {
  if (typeof schema.$ref === "string") {
    const target = resolve(root, schema.$ref) as Record<string, unknown> | undefined;
    if (target === undefined) return [`${at}: unresolved ${schema.$ref}`];
    const { $ref: _, ...rest } = schema;
    return [...validate(target, value, root, at), ...validate(rest, value, root, at)];
  }
  const out: string[] = [];
  const typeOf = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v);
  if (schema.type !== undefined) {
    const types = ([] as unknown[]).concat(schema.type);
    const t = typeOf(value);
    if (!types.some((x) => x === t || (x === "number" && t === "integer"))) out.push(`${at}: ${t} is not ${types.join("|")}`);
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) out.push(`${at}: not one of ${schema.enum.join(", ")}`);
  if (typeof schema.pattern === "string" && typeof value === "string" && !new RegExp(schema.pattern, "u").test(value)) out.push(`${at}: does not match ${schema.pattern}`);
  if (typeof schema.minimum === "number" && typeof value === "number" && value < schema.minimum) out.push(`${at}: below ${schema.minimum}`);
  if (typeof schema.maximum === "number" && typeof value === "number" && value > schema.maximum) out.push(`${at}: above ${schema.maximum}`);
  if (Array.isArray(schema.oneOf)) {
    const passing = schema.oneOf.filter((s) => validate(s as Record<string, unknown>, value, root, at).length === 0).length;
    if (passing !== 1) out.push(`${at}: matches ${passing} of oneOf`);
  }
  if (typeOf(value) === "object") {
    const v = value as Record<string, unknown>;
    const props = (schema.properties ?? {}) as Record<string, Record<string, unknown>>;
    for (const r of (schema.required ?? []) as string[]) if (!(r in v)) out.push(`${at}.${r}: required`);
    for (const [k, x] of Object.entries(v)) {
      if (k in props) out.push(...validate(props[k]!, x, root, `${at}.${k}`));
      else if (schema.additionalProperties === false) out.push(`${at}.${k}: not allowed`);
      else if (typeof schema.additionalProperties === "object") out.push(...validate(schema.additionalProperties as Record<string, unknown>, x, root, `${at}.${k}`));
    }
  }
  if (Array.isArray(value) && typeof schema.items === "object") value.forEach((x, i) => out.push(...validate(schema.items as Record<string, unknown>, x, root, `${at}[${i}]`)));
  return out;
}

describe("the shipped JSON Schema (dist/gateway.schema.json)", () => {
  it("stands alone: draft 2020-12 with an $id, every $ref local and resolvable, attention_dp_config inlined, upstreams optional", () => {
    const schema = JSON.parse(JSON.stringify(gatewayConfigSchema)) as Record<string, unknown>;
    expect(schema.$schema).toBe("https://json-schema.org/draft/2020-12/schema");
    expect(typeof schema.$id).toBe("string");
    expect(schema.required ?? []).not.toContain("upstreams");
    const all = refs(schema);
    expect(all.length).toBeGreaterThan(0);
    for (const { ref, at } of all) {
      expect(ref, at).toMatch(/^#\//);
      expect(resolve(schema, ref), `${at}: ${ref}`).toBeDefined();
    }
    const { $schema: _, ...inlined } = attentionDpConfigSchema as Record<string, unknown>;
    expect(resolve(schema, "#/$defs/attention_dp_config")).toEqual(JSON.parse(JSON.stringify(inlined)));
    // No subschema declares its own $schema (a validator would refuse a dialect change there).
    expect(JSON.stringify((schema.$defs as object) ?? {})).not.toContain("$schema");
  });

  it("the example file and the README's block are valid by it; a misspelt setting and a bad attention_dp_config field are not", () => {
    const schema = gatewayConfigSchema as unknown as Record<string, unknown>;
    const example = parse(readFileSync("examples/gateway/gateway.yaml", "utf8")) as Record<string, unknown>;
    expect(validate(schema, example, schema)).toEqual([]);
    expect(validate(schema, parse(readFileSync("examples/gateway/disaggregated.yaml", "utf8")), schema)).toEqual([]);
    expect(validate(schema, { disaggregation: { protocol: "nixl" } }, schema)).not.toEqual([]);
    expect(validate(schema, { listen: { port: 0 } }, schema)).toEqual([]); // upstreams from flags
    expect(validate(schema, { ...example, limits: { max_bodyy: 3 } }, schema)).toEqual(["$.limits.max_bodyy: not allowed"]);
    expect(validate(schema, { ...example, attention_dp_config: { kv_cache_routing_fair_share_multiplier: "2" } }, schema)).toEqual(["$.attention_dp_config.kv_cache_routing_fair_share_multiplier: string is not number"]);
    expect(validate(schema, { ...example, auth: { admin_api_key: "k", api_keys: ["a"] } }, schema)).toEqual([]);
  });

  it("the built file is the same document", () => {
    const built = JSON.parse(readFileSync("gateway/dist/gateway.schema.json", "utf8")) as unknown;
    expect(built).toEqual(JSON.parse(JSON.stringify(gatewayConfigSchema)));
  });
});
