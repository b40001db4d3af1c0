// `adp-router-gateway serve` as a user runs it: the built CLI in a child process, on
// loopback, in front of mock engines. Starting prints the URL on a line of its
// own; every failure to start is one message and a non-zero exit, no stack.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { startMockEngine, trackedForCleanup, urlFrom } from "../support/mock-engine.js";
import { metricsByIndex } from "../support/metrics.js";
import { runCli, startServe } from "../support/processes.js";

const CLI = path.resolve("gateway/dist/cli.js");
const { children, engines } = trackedForCleanup();

/** Runs the built CLI to its exit (killed after `timeoutMs`). */
const run = (args: string[], timeoutMs = 10_000) => runCli(CLI, args, children, timeoutMs);

/** Starts `adp-router-gateway serve` and resolves with the URL it prints. */
const start = (args: string[]) => startServe(CLI, args, children);

describe("adp-router-gateway serve", () => {
  it("prints its URL on a line of its own, proxies, and drains an in-flight stream on SIGTERM before exiting 0", async () => {
    const engine = await startMockEngine("e0", { chunks: 6, chunkGapMs: 100 });
    engines.push(engine);
    const { child, url, exited } = await start(["--port", "0", "--upstream", engine.url, "--log-level", "silent"]);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }) });
    const reader = response.body!.getReader();
    await reader.read(); // the stream has started
    child.kill("SIGTERM");
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text).toContain("data: [DONE]");
    expect(await exited).toBe(0);
  });

  it("a busy port: one message naming it, exit 1, no stack trace", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
    const port = (blocker.address() as { port: number }).port;
    const engine = await startMockEngine("e0");
    engines.push(engine);
    const r = await run(["serve", "--port", String(port), "--upstream", engine.url]);
    blocker.close();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`127.0.0.1:${port} is already in use`);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("an unreachable upstream: one message naming each (refused port, unknown host), exit 1, no stack trace, nothing listening", async () => {
    const engine = await startMockEngine("e0");
    engines.push(engine);
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const deadPort = (closed.address() as { port: number }).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const r = await run(["serve", "--port", "0", "--upstream", engine.url, "--upstream", `http://127.0.0.1:${deadPort}`, "--upstream", "http://no-such-engine.invalid:8000"]);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe(""); // never listened: no URL printed
    expect(r.stderr).toContain("2 upstreams cannot be reached");
    expect(r.stderr).toContain(`upstream 1 (http://127.0.0.1:${deadPort}): connection refused`);
    expect(r.stderr).toMatch(/upstream 2 \(http:\/\/no-such-engine\.invalid:8000\): host name (not found|could not be resolved)/);
    expect(r.stderr).not.toContain("upstream 0");
    expect(r.stderr).toContain("--allow-unreachable");
    expect(r.stderr).not.toMatch(/\n\s+at /);
    // Allowed, it starts, warns once, and serves from the reachable one.
    const started = await start(["--port", "0", "--upstream", `http://127.0.0.1:${deadPort}`, "--upstream", engine.url, "--allow-unreachable", "--log-level", "silent"]);
    const answer = await fetch(`${started.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hello" }) });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("x-adp-upstream")).toBe("1");
    expect(started.stderr()).toContain(`warning: starting with unreachable upstreams`);
    expect(started.stderr()).toContain(`upstream 0 (http://127.0.0.1:${deadPort}): connection refused`);
    // The unreachable one starts unhealthy: /health says so, and no request tries it (none is retried away from it).
    const health = (await (await fetch(`${started.url}/health`)).json()) as { upstreams: { healthy: boolean }[] };
    expect(health.upstreams.map((u) => u.healthy)).toEqual([false, true]);
    expect(metricsByIndex(await (await fetch(`${started.url}/metrics`)).text())).toContain('adp_gateway_upstream_retries_total{upstream="0"} 0');
    started.child.kill("SIGTERM");
    expect(await started.exited).toBe(0);
    // Alone, it answers 503 at once (not 502 after trying it), until its checks pass.
    const alone = await start(["--port", "0", "--upstream", `http://127.0.0.1:${deadPort}`, "--allow-unreachable", "--log-level", "silent"]);
    expect((await fetch(`${alone.url}/health`)).status).toBe(503);
    const t0 = performance.now();
    const refused = await fetch(`${alone.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hello" }) });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("no_healthy_upstream");
    expect(performance.now() - t0).toBeLessThan(1000);
    alone.child.kill("SIGTERM");
    expect(await alone.exited).toBe(0);
  });

  it("bad configuration: every problem with its file and line, exit 2, no stack trace", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "adp-serve-"));
    const file = path.join(dir, "gateway.yaml");
    writeFileSync(
      file,
      ["listen:", "  port: 99999", "upstreams:", "  - url: 127.0.0.1:8001", "  - url: ftp://example.invalid", "limits:", "  max_bodyy: 3", "attention_dp_config:", "  enable_kv_cache_aware_routing: yes please", "  kv_cache_routing_max_sesions: 4", ""].join("\n"),
    );
    const r = await run(["serve", "--config", file]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(`${file}:2: listen.port: must be an integer in [0, 65535]`);
    expect(r.stderr).toContain(`${file}:4: upstreams[0].url: has no scheme (write it as http://127.0.0.1:8001)`);
    expect(r.stderr).toContain(`${file}:5: upstreams[1].url: must be an http:// or https:// URL`);
    expect(r.stderr).toContain(`${file}:7: limits.max_bodyy: is not a setting here`);
    expect(r.stderr).toContain(`${file}:9: attention_dp_config.enable_kv_cache_aware_routing`);
    expect(r.stderr).toMatch(new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:10: attention_dp_config.kv_cache_routing_max_sesions: is not an attention_dp_config field \\(did you mean "kv_cache_routing_max_sessions"\\?\\)`));
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it.each([
    [["--upstream", "localhost:8001"], "--upstream: upstream[0]: has no scheme (write it as http://localhost:8001)"],
    [["--upstream", "http://127.0.0.1:8001", "--policy", "fastest"], "policy: must be one of kv_cache_aware, conversation, default"],
    [[], "at least one upstream is required"],
    [["--upstream", "http://127.0.0.1:8001", "--port", "http"], "--port must be an integer"],
    [["--config", "/nonexistent/gateway.yaml"], "cannot read /nonexistent/gateway.yaml: no such file"],
    [["--frobnicate"], "Unknown option '--frobnicate'"],
  ])("%j: one clear message and exit 2", async (args, message) => {
    const r = await run(["serve", ...args]);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe("examples/gateway", () => {
  it("gateway.mjs starts the gateway from code, and gateway.yaml is a valid configuration", async () => {
    const engine = await startMockEngine("e0");
    engines.push(engine);
    const child = spawn(process.execPath, [path.resolve("examples/gateway/gateway.mjs"), engine.url], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PORT: "0" } });
    children.push(child);
    const url = await urlFrom(child);
    const response = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hi" }) });
    expect(response.status).toBe(200);
    const { loadGatewayConfig } = await import("../../gateway/src/index.js");
    // Run as its header says, with no environment variable set.
    const config = loadGatewayConfig({ file: { name: "gateway.yaml", text: readFileSync("examples/gateway/gateway.yaml", "utf8") }, env: {} });
    expect(config.upstreams.map((u) => u.name)).toEqual(["engine-a", "engine-b"]);
    expect(config.upstreams[1]!.apiKey).toBeNull();
  });

  it("gateway.mjs drains on SIGTERM: a stream in flight finishes whole, then it exits 0", async () => {
    const engine = await startMockEngine("e0", { chunks: 6, chunkGapMs: 100 });
    engines.push(engine);
    const child = spawn(process.execPath, [path.resolve("examples/gateway/gateway.mjs"), engine.url], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PORT: "0" } });
    children.push(child);
    const url = await urlFrom(child);
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    const response = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hi", stream: true }) });
    expect(response.status).toBe(200);
    child.kill("SIGTERM");
    const body = await response.text();
    expect(body).toContain("data: [DONE]");
    expect(await exited).toBe(0);
  });

  it("the README's first screen shows how to run it and a complete configuration, the same as gateway.yaml", async () => {
    const { loadGatewayConfig } = await import("../../gateway/src/index.js");
    const readme = readFileSync("README.md", "utf8");
    const firstScreen = readme.split("\n").slice(0, 45).join("\n");
    // The root package's bin, which runs the gateway where both are installed: in a fresh clone npm ci links no
    // adp-router-gateway bin (gateway/dist does not exist yet when it runs), so npx would not find that name.
    expect(firstScreen).toMatch(/npx adp-router serve --upstream http:\/\/\S+/);
    const help = spawnSync(process.execPath, ["dist/cli.js", "serve", "--help"], { encoding: "utf8" });
    expect({ status: help.status, usage: help.stdout.split("\n")[0] }).toEqual({ status: 0, usage: "Usage: adp-router serve [options]" });
    const block = /```yaml\n([\s\S]*?)```/.exec(firstScreen)?.[1];
    expect(block).toBeDefined();
    const text = (v: unknown) => JSON.stringify(v, (_k, x: unknown) => (x instanceof Map ? [...x] : x));
    const inline = loadGatewayConfig({ file: { name: "README.md", text: block! }, env: {} });
    const example = loadGatewayConfig({ file: { name: "gateway.yaml", text: readFileSync("examples/gateway/gateway.yaml", "utf8") }, env: {} });
    expect(text(inline)).toBe(text(example));
    // Every section the example sets, the README's block sets too.
    const sections = (yaml: string) => yaml.split("\n").filter((l) => /^[a-z_]+:/.test(l)).map((l) => l.split(":")[0]).sort();
    expect(sections(block!)).toEqual(sections(readFileSync("examples/gateway/gateway.yaml", "utf8")));
  });
});
