// The gateway's package as a platform team gets it: packed from this
// repository next to the library's, installed into a fresh project (the
// library from its tarball, every other dependency from npm), its bin started
// in front of a mock engine and sent a request; and what each tarball holds.
import { spawn, spawnSync, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { startMockEngine, trackedForCleanup, urlFrom } from "../support/mock-engine.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const { children, engines } = trackedForCleanup();

/** `npm pack` of the package in `dir` (already built) into `to`; its file name and the paths it holds. */
function pack(dir: string, to: string): { file: string; files: string[]; size: number } {
  const out = execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", to], { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const [m] = JSON.parse(out.slice(out.indexOf("["))) as [{ filename: string; size: number; files: { path: string }[] }];
  return { file: path.join(to, m.filename), files: m.files.map((f) => f.path), size: m.size };
}

describe("the gateway's package in a fresh project", () => {
  let consumer = "";
  let library: ReturnType<typeof pack>;
  let gateway: ReturnType<typeof pack>;
  beforeAll(() => {
    consumer = mkdtempSync(path.join(tmpdir(), "adp-gateway-consumer-"));
    library = pack(root, consumer);
    gateway = pack(path.join(root, "gateway"), consumer);
    writeFileSync(path.join(consumer, "package.json"), JSON.stringify({ name: "platform", version: "1.0.0", private: true }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", library.file, gateway.file], { cwd: consumer, stdio: "pipe" });
  }, 240_000);

  it("each tarball holds its own files: the library no gateway code and no dependency, the gateway its bundles, workers, declarations and schema", () => {
    expect(library.files.some((f) => f.startsWith("gateway/") || f.includes("serve"))).toBe(false);
    for (const f of ["dist/index.js", "dist/cli.js", "dist/tokenize-worker.js", "dist/batch-decode-worker.js", "dist/types/index.d.ts", "dist/gateway.schema.json", "package.json", "README.md", "LICENSE"]) expect(gateway.files).toContain(f);
    expect(gateway.files.filter((f) => f.startsWith("src/") || f.startsWith("test/"))).toEqual([]);
    console.log(`tarballs: adp-router ${(library.size / 1024).toFixed(0)} KiB, adp-router-gateway ${(gateway.size / 1024).toFixed(0)} KiB`);
  });

  it("brings the library (the packed one, once) and its own dependencies", () => {
    const tree = JSON.parse(execFileSync("npm", ["ls", "--json"], { cwd: consumer, encoding: "utf8" })) as { dependencies: Record<string, { version: string }> };
    expect(Object.keys(tree.dependencies).sort()).toEqual(["adp-router", "adp-router-gateway"]);
    const manifest = (dir: string) => JSON.parse(readFileSync(path.join(consumer, "node_modules", dir, "package.json"), "utf8")) as { version: string; dependencies?: Record<string, string> };
    const wanted = Object.keys(manifest("adp-router-gateway").dependencies ?? {});
    for (const d of ["adp-router", "undici", "pino", "yaml", "zeromq", "@nats-io/transport-node", "@msgpack/msgpack"]) expect(wanted).toContain(d);
    for (const d of wanted) expect(existsSync(path.join(consumer, "node_modules", d, "package.json")), d).toBe(true);
    // One copy of the library, the packed one: no second one nested under the gateway.
    expect(manifest("adp-router").version).toBe(JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")).version);
    expect(existsSync(path.join(consumer, "node_modules", "adp-router-gateway", "node_modules", "adp-router"))).toBe(false);
  });

  it("adp-router-gateway serve answers requests, and adp-router serve runs the same gateway", async () => {
    const engine = await startMockEngine("e0");
    engines.push(engine);
    for (const [bin, args] of [["adp-router-gateway", ["serve"]], ["adp-router", ["serve"]]] as const) {
      const child = spawn(path.join(consumer, "node_modules", ".bin", bin), [...args, "--workers", "1", "--upstream", engine.url, "--port", "0", "--log-level", "silent"], { cwd: consumer, stdio: ["ignore", "pipe", "pipe"] });
      children.push(child);
      const url = await urlFrom(child);
      const answer = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }] }) });
      expect(answer.status, bin).toBe(200);
      expect(((await answer.json()) as { choices: unknown[] }).choices.length).toBeGreaterThan(0);
      const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
      child.kill("SIGTERM");
      expect(await exited, bin).toBe(0);
    }
    // As the README's first screen runs it: through npx (which does not pass signals on: stopped as a group).
    const npx = spawn("npx", ["--no-install", "adp-router-gateway", "serve", "--workers", "1", "--upstream", engine.url, "--port", "0", "--log-level", "silent"], { cwd: consumer, stdio: ["ignore", "pipe", "pipe"], detached: true });
    try {
      const url = await urlFrom(npx);
      expect((await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hi" }) })).status).toBe(200);
    } finally {
      process.kill(-npx.pid!, "SIGKILL");
    }
    const help = spawnSync(path.join(consumer, "node_modules", ".bin", "adp-router-gateway"), ["--help"], { cwd: consumer, encoding: "utf8" });
    expect(help.stdout).toContain("validate FILE");
  }, 60_000);
});
