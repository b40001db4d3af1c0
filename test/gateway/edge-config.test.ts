// Configuration traps of the gateway's edge (issue #22), end to end on
// loopback: an upstream URL written the OpenAI `base_url` way (ending in /v1)
// is taken without it and warned about; duplicates after normalization (and
// duplicate names) are refused from the file, the flags, reload() and the
// admin API; an upstream that is the gateway itself is refused wherever it
// can be given (createGateway, reload, the admin API, the CLI); and a loop
// through another proxy costs one hop (508 loop_detected), not an avalanche.
import { spawn, type ChildProcess } from "node:child_process";
import { createServer as createHttpServer, request as httpRequest, type Server } from "node:http";
import { createConnection, type AddressInfo } from "node:net";
import path from "node:path";
import OpenAI from "openai";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, GatewayConfigError, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { freePort, runCli } from "../support/processes.js";

const CLI = path.resolve("gateway/dist/cli.js");
const ADMIN_KEY = "admin-key-for-edge-tests-0123";

const open: { close(): Promise<void> }[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  while (open.length > 0) await open.pop()!.close();
});

async function engine(name: string): Promise<MockEngine> {
  const e = await startMockEngine(name);
  open.push(e);
  return e;
}

/** A gateway from a plain configuration object (or a loaded one), its log lines collected. */
async function gateway(config: Parameters<typeof createGateway>[0]): Promise<{ gateway: Gateway; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const g = await createGateway(config, { logger });
  open.push(g);
  return { gateway: g, logs };
}


/** What `fn` rejects with (fails when it resolves). */
async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection");
}

const fields = (error: unknown) => (error as GatewayConfigError).issues.map((i) => i.field);
const completionsTo = (e: MockEngine) => e.received.filter((r) => r.path.includes("completions")).map((r) => r.path);
const infoLines = (g: Gateway) => g.metrics().split("\n").filter((l) => l.startsWith("adp_gateway_upstream_info{")).sort();

async function admin(g: Gateway, method: string, route: string, body?: unknown): Promise<{ status: number; code: unknown; json: unknown }> {
  const response = await fetch(`${g.url}${route}`, { method, headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const json = (await response.json()) as { error?: { code?: unknown } };
  return { status: response.status, code: json.error?.code, json };
}

async function chatThrough(g: Gateway): Promise<string> {
  const client = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: "x", maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
  return answer.choices[0]!.message.content ?? "";
}

/** Runs the built CLI to its exit (killed after `timeoutMs`). */
const run = (args: string[], timeoutMs = 15_000) => runCli(CLI, args, children, timeoutMs);

describe("an upstream URL ending in /v1", () => {
  it("is taken without the /v1, with a warning in config.warnings and in the log at start; requests reach /v1/chat/completions", async () => {
    // Old code (35819c5): the /v1 was kept, no warning, and every request went to /v1/v1/chat/completions (a 404).
    const e = await engine("e0");
    const fromFlags = loadGatewayConfig({ flags: { upstreams: [`${e.url}/v1`], port: 0 } });
    expect(fromFlags.upstreams.map((u) => u.url)).toEqual([e.url]);
    expect(fromFlags.warnings).toHaveLength(1);
    expect(fromFlags.warnings[0]!.message).toContain("/v1");
    expect(fromFlags.warnings[0]!.message).toContain(e.url);
    const { gateway: g, logs } = await gateway(fromFlags);
    expect(logs.some((l) => l.level === 40 && /^configuration: upstreams?\[0\](\.url)?: ends in \/v1/.test(String(l.msg)))).toBe(true);
    expect(await chatThrough(g)).toBe("hello from e0");
    expect(completionsTo(e)).toEqual(["/v1/chat/completions"]);

    // A file entry with a trailing slash after the /v1: the same, and the warning names its line.
    const f = await engine("f0");
    const text = ["listen:", "  port: 0", "upstreams:", `  - url: ${f.url}/v1/`, "    name: file-engine", ""].join("\n");
    const fromFile = loadGatewayConfig({ file: { name: "gateway.yaml", text } });
    expect(fromFile.upstreams.map((u) => u.url)).toEqual([f.url]);
    expect(fromFile.warnings.map((w) => [w.field, w.where])).toEqual([["upstreams[0].url", "gateway.yaml:4"]]);
    const { gateway: h, logs: hLogs } = await gateway(fromFile);
    expect(hLogs.some((l) => l.level === 40 && String(l.msg).startsWith("configuration: upstreams[0].url: ends in /v1"))).toBe(true);
    expect(await chatThrough(h)).toBe("hello from f0");
    expect(completionsTo(f)).toEqual(["/v1/chat/completions"]);
  });

  it("the built CLI (`serve --upstream …/v1`) logs the warning and sends requests to /v1/chat/completions", async () => {
    // Old code (35819c5): no warning, and the engine saw /v1/v1/chat/completions.
    const e = await engine("e0");
    const child = spawn(process.execPath, [CLI, "serve", "--workers", "1", "--upstream", `${e.url}/v1`, "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(child);
    let stdout = "";
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout!.on("data", (d) => {
        stdout += d;
        const line = stdout.split("\n").find((l) => /^http:\/\/\S+$/.test(l));
        if (line) resolve(line);
      });
      void exited.then((code) => reject(new Error(`exited ${code}`)));
    });
    const warning = stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { level: number; msg: string }).find((l) => /^configuration: upstreams?\[0\](\.url)?: ends in \/v1/.test(l.msg));
    expect(warning?.level).toBe(40);
    const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
    expect(response.status).toBe(200);
    expect(completionsTo(e)).toEqual(["/v1/chat/completions"]);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });
});

describe("a CONNECT through the built CLI", () => {
  it("a client that sends CONNECT and resets while its 405 lingers leaves the process serving", async () => {
    // Old code (1d3dc86): node:http takes its error listener off a CONNECT's socket; the reset was an uncaught
    // 'error' (ECONNRESET) that ended the process.
    const e = await engine("e0");
    const child = spawn(process.execPath, [CLI, "serve", "--workers", "1", "--upstream", e.url, "--port", "0", "--log-level", "warn"], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(child);
    let stdout = "";
    let exitedWith: number | null | undefined;
    child.on("exit", (code) => (exitedWith = code));
    const url = await new Promise<string>((resolve) => {
      child.stdout!.on("data", (d) => {
        stdout += d;
        const line = stdout.split("\n").find((l) => /^http:\/\/\S+$/.test(l));
        if (line) resolve(line);
      });
    });
    const { hostname, port } = new URL(url);
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const s = createConnection(Number(port), hostname, () => {
          s.write("CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n");
          setTimeout(() => {
            s.resetAndDestroy();
            resolve();
          }, 20);
        });
        s.on("error", () => {});
      });
    }
    await new Promise((r) => setTimeout(r, 400));
    expect(exitedWith).toBeUndefined();
    expect((await fetch(`${url}/health`)).status).toBe(200);
    child.kill("SIGTERM");
  });
});

describe("duplicate upstreams", () => {
  it("are refused after normalization (trailing slash, scheme and host case, default port) from the file and from the flags; so are duplicate names", () => {
    // Old code (35819c5): nothing compared the entries; the same engine became two ranks (twice its share of traffic) and a repeated name was taken.
    const file = (...entries: string[]) => ({ file: { name: "gw.yaml", text: ["upstreams:", ...entries.map((e) => `  - ${e}`), ""].join("\n") } });
    for (const [a, b] of [
      ["http://127.0.0.1:8101", "http://127.0.0.1:8101/"],
      ["HTTP://127.0.0.1:8101", "http://127.0.0.1:8101"],
      ["http://Engine-A.example:8101", "http://engine-a.example:8101//"],
      ["http://127.0.0.1:80/base", "http://127.0.0.1/base/"],
    ] as const) {
      const refusal = (() => {
        try {
          loadGatewayConfig(file(a, b));
        } catch (error) {
          return error;
        }
        return null;
      })();
      expect(refusal, `${a} vs ${b}`).toBeInstanceOf(GatewayConfigError);
      expect((refusal as GatewayConfigError).issues).toMatchObject([{ field: "upstreams[1].url", where: "gw.yaml:3" }]);
      expect((refusal as GatewayConfigError).message).toContain("upstreams[0]");
      let flagRefusal: unknown = null;
      try {
        loadGatewayConfig({ flags: { upstreams: [a, b] } });
      } catch (error) {
        flagRefusal = error;
      }
      expect(flagRefusal, `--upstream ${a} --upstream ${b}`).toBeInstanceOf(GatewayConfigError);
      expect(fields(flagRefusal)).toEqual(["upstream[1]"]);
      expect((flagRefusal as GatewayConfigError).issues[0]!.where).toBe("--upstream");
    }
    // A name given twice, and a configured name that is another entry's derived one.
    let named: unknown = null;
    try {
      loadGatewayConfig(file("{ url: 'http://127.0.0.1:8101', name: same }", "{ url: 'http://127.0.0.1:8102', name: same }"));
    } catch (error) {
      named = error;
    }
    expect(fields(named)).toEqual(["upstreams[1].name"]);
    let derived: unknown = null;
    try {
      loadGatewayConfig(file("http://127.0.0.1:8101", "{ url: 'http://127.0.0.1:8102', name: '127.0.0.1:8101' }"));
    } catch (error) {
      derived = error;
    }
    expect(fields(derived)).toEqual(["upstreams[1].name"]);
    // Distinct ones are fine.
    expect(loadGatewayConfig(file("http://127.0.0.1:8101", "http://127.0.0.1:8102")).upstreams.map((u) => u.name)).toEqual(["127.0.0.1:8101", "127.0.0.1:8102"]);
  });

  it("are refused by reload() (it rejects, the fleet unchanged) and by the admin API (409)", async () => {
    // Old code (35819c5): reload took the duplicates (two ranks for one engine); the admin check compared URLs but not names.
    const e0 = await engine("e0");
    const e1 = await engine("e1");
    const { gateway: g } = await gateway({ listen: { port: 0 }, upstreams: [{ url: e0.url, name: "first" }], auth: { admin_api_key: ADMIN_KEY }, health: { interval_ms: 60_000 } });
    const before = infoLines(g);
    const router = g.router;
    for (const upstreams of [[e1.url, `${e1.url}/`], [e1.url, e1.url.replace("http://", "HTTP://")], [{ url: e0.url, name: "twin" }, { url: e1.url, name: "twin" }]]) {
      const refusal = await rejection(() => g.reload({ listen: { port: 0 }, upstreams, auth: { admin_api_key: ADMIN_KEY }, health: { interval_ms: 60_000 } }));
      expect(refusal, JSON.stringify(upstreams)).toBeInstanceOf(GatewayConfigError);
      expect(fields(refusal)[0]).toMatch(/^upstreams\[1\]\.(url|name)$/);
      expect(infoLines(g)).toEqual(before);
      expect(g.router).toBe(router);
    }
    expect(await chatThrough(g)).toBe("hello from e0");
    // The admin API: the same URL written another way, and a name already taken.
    for (const url of [`${e0.url}/`, e0.url.replace("http://", "HTTP://"), `${e0.url}/v1`]) {
      const r = await admin(g, "POST", "/admin/upstreams", { url });
      expect([url, r.status, r.code]).toEqual([url, 409, "upstream_exists"]);
    }
    const sameName = await admin(g, "POST", "/admin/upstreams", { url: e1.url, name: "first" });
    expect(sameName.status).toBe(409);
    expect(infoLines(g)).toEqual(before);
    // A new engine under a new name is added.
    expect((await admin(g, "POST", "/admin/upstreams", { url: e1.url, name: "second" })).status).toBe(201);
    expect(infoLines(g)).toHaveLength(2);
  });
});

describe("an upstream that is the gateway itself", () => {
  it("makes createGateway reject naming upstreams[i].url (its address, or a name for it); another port on the host is taken", async () => {
    // Old code (35819c5): the gateway started, proxying to itself (every request looped back to it).
    const e = await engine("e0");
    const port = await freePort();
    for (const self of [`http://127.0.0.1:${port}`, `http://localhost:${port}`, `http://LOCALHOST:${port}/`]) {
      const refusal = await rejection(() => createGateway({ listen: { host: "127.0.0.1", port }, upstreams: [e.url, self], logging: { level: "silent" } }));
      expect(refusal, self).toBeInstanceOf(GatewayConfigError);
      expect(fields(refusal)).toEqual(["upstreams[1].url"]);
      expect((refusal as Error).message).toContain("is this gateway itself");
    }
    // Refused, it let go of its port: a gateway with a good fleet takes it, and an engine on another port of the same host is fine.
    const { gateway: g } = await gateway({ listen: { host: "127.0.0.1", port }, upstreams: [e.url], auth: { admin_api_key: ADMIN_KEY }, health: { interval_ms: 60_000 } });
    expect(g.url).toBe(`http://127.0.0.1:${port}`);
    expect(await chatThrough(g)).toBe("hello from e0");
  });

  it("is refused by reload() (rejects, fleet unchanged) and by POST /admin/upstreams (400 upstream_is_self)", async () => {
    // Old code (35819c5): reload and the admin API both added the gateway to its own fleet.
    const e = await engine("e0");
    const other = await engine("e1");
    const port = await freePort();
    const settings = { listen: { host: "127.0.0.1", port }, auth: { admin_api_key: ADMIN_KEY }, health: { interval_ms: 60_000 } };
    const { gateway: g } = await gateway({ ...settings, upstreams: [e.url] });
    const before = infoLines(g);
    for (const self of [`http://127.0.0.1:${port}`, `http://localhost:${port}`]) {
      const refusal = await rejection(() => g.reload({ ...settings, upstreams: [e.url, self] }));
      expect(refusal, self).toBeInstanceOf(GatewayConfigError);
      expect(fields(refusal)).toEqual(["upstreams[1].url"]);
      expect(infoLines(g)).toEqual(before);
      const r = await admin(g, "POST", "/admin/upstreams", { url: self });
      expect([self, r.status, r.code]).toEqual([self, 400, "upstream_is_self"]);
      expect(infoLines(g)).toEqual(before);
    }
    // Another port of the same host is an engine like any other.
    expect((await admin(g, "POST", "/admin/upstreams", { url: other.url })).status).toBe(201);
    expect((await g.reload({ ...settings, upstreams: [other.url] })).removed).toEqual([e.url]);
    expect(await chatThrough(g)).toBe("hello from e1");
  });

  it.each([[[] as string[]], [["--allow-unreachable"]]])("the CLI (extra flags %j) exits non-zero with one message naming it", async (extra) => {
    // Old code (35819c5): without the flag, "cannot be reached ... start it first" (it is the gateway itself, not yet
    // listening: starting it first is impossible); with it, the gateway started and looped on itself.
    const e = await engine("e0");
    const port = await freePort();
    const r = await run(["serve", "--port", String(port), "--upstream", e.url, "--upstream", `http://localhost:${port}`, "--log-level", "silent", ...extra]);
    expect(r.status).not.toBeNull(); // it exited by itself, not killed by the deadline
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe(""); // never announced a URL
    expect(r.stderr).toContain("upstreams[1].url: is this gateway itself");
    expect(r.stderr.match(/adp-router-gateway serve: (?!warning)/g)).toHaveLength(1);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

/** A tiny forwarding proxy: every request goes on to `target` (set once known) with its headers as they came. */
async function forwardingProxy(): Promise<{ url: string; target: string; forwarded: { method: string; path: string; via: string | undefined }[]; close(): Promise<void> }> {
  const state = { target: "", forwarded: [] as { method: string; path: string; via: string | undefined }[] };
  const server: Server = createHttpServer((req, res) => {
    state.forwarded.push({ method: req.method ?? "", path: req.url ?? "", via: req.headers.via as string | undefined });
    const out = httpRequest(`${state.target}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    out.on("error", () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const proxy = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get target() {
      return state.target;
    },
    set target(t: string) {
      state.target = t;
    },
    forwarded: state.forwarded,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  open.push(proxy);
  return proxy;
}

const chatBody = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] });
const loops = (g: Gateway) => Number(/^adp_gateway_loops_detected_total (\d+)$/m.exec(g.metrics())?.[1]);

describe("a loop through another proxy", () => {
  it("costs one hop: 508 loop_detected, the proxy forwarded the request once, loops_detected_total 1", async () => {
    // Old code (35819c5): no Via: the request went round A → proxy → A → … until sockets or time ran out (dozens of hops).
    const p = await forwardingProxy();
    const { gateway: a, logs } = await gateway({ listen: { port: 0 }, upstreams: [{ url: p.url, name: "loop-proxy" }], health: { interval_ms: 60_000 } });
    p.target = a.url;
    const response = await fetch(`${a.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody, signal: AbortSignal.timeout(10_000) });
    const body = (await response.json()) as { error: { code: string } };
    expect(response.status).toBe(508);
    expect(body.error.code).toBe("loop_detected");
    const completions = p.forwarded.filter((f) => f.path === "/v1/chat/completions");
    expect(completions).toHaveLength(1);
    expect(completions[0]!.via).toMatch(/^1\.1 adp-router-[0-9a-f]{12}$/);
    // The looped request, and the client's answered with it; health checks carry the Via too, and loop back likewise.
    const looped = logs.filter((l) => l.msg === "request" && l.status === 508);
    expect(looped.filter((l) => l.path === "/v1/chat/completions")).toHaveLength(2);
    expect(loops(a)).toBe(looped.filter((l) => l.path === "/v1/chat/completions" || l.path === "/health").length - 1);
  });

  it("through a second gateway too: A → proxy → B → A is refused by A, each gateway forwarding it once", async () => {
    // Old code (35819c5): A and B passed the request round between them without end.
    const p = await forwardingProxy();
    const { gateway: a } = await gateway({ listen: { port: 0 }, upstreams: [p.url], health: { interval_ms: 60_000 } });
    const { gateway: b } = await gateway({ listen: { port: 0 }, upstreams: [a.url], health: { interval_ms: 60_000 } });
    p.target = b.url;
    const response = await fetch(`${a.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", via: "1.1 client-proxy" }, body: chatBody, signal: AbortSignal.timeout(10_000) });
    expect(response.status).toBe(508);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("loop_detected");
    const completions = p.forwarded.filter((f) => f.path === "/v1/chat/completions");
    expect(completions).toHaveLength(1);
    // The client's Via is kept, A's hop appended.
    expect(completions[0]!.via).toMatch(/^1\.1 client-proxy, 1\.1 adp-router-[0-9a-f]{12}$/);
    expect(loops(a)).toBe(1);
    expect(loops(b)).toBe(0); // B saw A's entry, not its own: it forwarded it once
  });
});
