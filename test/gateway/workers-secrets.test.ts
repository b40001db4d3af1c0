// Setting files (keys named by `*_file` settings) under `serve --workers 2`,
// as a user meets them: the built CLI, two mock engines. The primary reads
// them with the configuration and its workers take its texts, so a worker
// started again after a key file changed runs the key its siblings run (it
// read the file itself, and refused what its siblings took).
import { mkdtempSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { subagentSignature } from "../../gateway/src/requests/subagent-auth.js";
import { startEngines, trackedForCleanup } from "../support/mock-engine.js";
import { processParents, startServe } from "../support/processes.js";

const CLI = path.resolve("gateway/dist/cli.js");
const tracked = trackedForCleanup();

/** A context request of conversation `child` with a sub-agent hint signed by `key`, on a connection of its own; its status. */
function signedChat(url: string, key: string, child: string): Promise<number> {
  const { hostname, port } = new URL(url);
  const claim = { affinityId: "parent", model: "m", conversationId: child, requestType: "context_only", disaggRequestId: "7" };
  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: `hi from ${child}` }], conversation_params: { conversation_id: child }, disaggregated_params: { request_type: "context_only", disagg_request_id: 7 } });
  const headers = { "content-type": "application/json", "x-trtllm-subagent-affinity-id": "parent", "x-trtllm-subagent-affinity-auth": subagentSignature(key, claim, "CONTEXT") };
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port: Number(port), method: "POST", path: "/v1/chat/completions", agent: false, headers }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** Each worker's count of refused sub-agent hints, by worker number, from /metrics (a worker's page answers for all). */
async function refusedByWorker(url: string): Promise<Map<number, number>> {
  const page = await (await fetch(`${url}/metrics`)).text();
  return new Map([...page.matchAll(/^adp_gateway_subagent_hints_refused_total\{worker="(\d+)"\} (\d+)$/gm)].map((m) => [Number(m[1]), Number(m[2])]));
}

describe("setting files with --workers 2", () => {
  it("a worker killed and started again after the key file changed takes the key its siblings run: no signed hint is refused", async () => {
    const engines = await startEngines(2, tracked.engines);
    const dir = mkdtempSync(path.join(tmpdir(), "adp-secrets-"));
    tracked.dirs.push(dir);
    const keyFile = path.join(dir, "key");
    const config = path.join(dir, "gateway.yaml");
    writeFileSync(keyFile, "the key the gateway started with\n");
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: round_robin }\nlogging: { level: warn }\npolicy: conversation\nauth: { internal_request_auth_key_file: ${keyFile} }\nupstreams:\n${engines.map((e) => `  - url: ${e.url}\n`).join("")}`);
    const { url, child, exited, stderr } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    // The file changes (a key rotated, no SIGHUP yet), and a worker dies.
    writeFileSync(keyFile, "a key written since\n");
    const [victim] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    process.kill(victim!, "SIGKILL");
    // Started again once both workers' pages are on /metrics again.
    for (let i = 0; i < 100 && !(/exited \(SIGKILL\): starting it again/.test(stderr()) && (await refusedByWorker(url)).size === 2); i++) await new Promise((r) => setTimeout(r, 100));
    expect((await refusedByWorker(url)).size).toBe(2);
    // Connections dealt in turn: both workers take some of these, each signed with the key the gateway started with.
    for (let i = 0; i < 8; i++) expect(await signedChat(url, "the key the gateway started with", `child-${i}`)).toBe(200);
    expect([...(await refusedByWorker(url)).values()]).toEqual([0, 0]);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});
