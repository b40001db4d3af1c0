// A sub-agent hint in front of real HTTP: with TensorRT-LLM's
// internal_request_auth_key set, the hint routes a request only when signed as
// TensorRT-LLM's edge signs it (PR #19175) on a context or generation request;
// unsigned, forged or aggregated hints are ignored and counted. Without the key
// the hint is taken as sent.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway, type StateEntry } from "../../gateway/src/index.js";
import { subagentSignature } from "../../gateway/src/requests/subagent-auth.js";
import { startEngines } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const KEY = "an internal key for the edge and the workers";

/** A gateway (conversation affinity) over two mock engines; its state log kept. */
async function gateway(withKey: boolean, key = KEY): Promise<{ g: Gateway; log: StateEntry[] }> {
  const engines = await startEngines(2, open);
  const dir = mkdtempSync(join(tmpdir(), "adp-subagent-"));
  writeFileSync(join(dir, "key"), `${key}\n`);
  const log: StateEntry[] = [];
  const g = await createGateway(
    { listen: { port: 0 }, upstreams: engines.map((e) => e.url), policy: "conversation", ...(withKey ? { auth: { internal_request_auth_key_file: join(dir, "key") } } : {}) },
    { logger: pino({ level: "silent" }), stateLog: { append: (e) => void log.push(e) } },
  );
  open.push(g);
  return { g, log };
}

/** A chat turn of conversation `conversation`, with a sub-agent hint and its headers. */
async function turn(g: Gateway, conversation: string, headers: Record<string, string>, disaggregated?: Record<string, unknown>): Promise<void> {
  const body = { model: "m", messages: [{ role: "user", content: `hi from ${conversation}` }], conversation_params: { conversation_id: conversation }, ...(disaggregated ? { disaggregated_params: disaggregated } : {}) };
  const response = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-trtllm-subagent-affinity-id": "parent", ...headers }, body: JSON.stringify(body) });
  await response.text();
  expect(response.status).toBe(200);
}

/** The keys bound so far (a taken hint binds the parent, an ignored one the child's own conversation). */
const bound = (log: StateEntry[]) => log.filter((e): e is Extract<StateEntry, { op: "bind" }> => e.op === "bind").map((e) => e.key);
const refused = (g: Gateway) => Number(/^adp_gateway_subagent_hints_refused_total (\d+)$/m.exec(g.metrics())?.[1] ?? NaN);

describe("sub-agent hints under TensorRT-LLM's signed scheme", () => {
  it("with the key: a context request signed as the edge signs it follows the parent; unsigned, forged and aggregated hints are ignored and counted", async () => {
    const { g, log } = await gateway(true);
    const params = { request_type: "context_only", disagg_request_id: 77 };
    const claim = { affinityId: "parent", model: "m", conversationId: "child-1", requestType: "context_only", disaggRequestId: "77" };
    await turn(g, "child-1", { "x-trtllm-subagent-affinity-auth": subagentSignature(KEY, claim, "CONTEXT") }, params);
    expect(bound(log)).toEqual(["parent"]);
    await turn(g, "child-2", {}, params); // unsigned
    await turn(g, "child-3", { "x-trtllm-subagent-affinity-auth": subagentSignature(KEY, claim, "CONTEXT") }, params); // child-1's signature
    await turn(g, "child-4", { "x-trtllm-subagent-affinity-auth": subagentSignature(KEY, { ...claim, conversationId: "child-4", requestType: null, disaggRequestId: null }, "CONTEXT") }); // aggregated
    expect(bound(log)).toEqual(["parent", "child-2", "child-3", "child-4"]);
    expect(refused(g)).toBe(3);
  });

  it("a 63-bit disagg_request_id (past 2^53) is signed with every digit, as TensorRT-LLM's Python signs it", async () => {
    const vectors = JSON.parse(readFileSync(new URL("../fixtures/subagent-auth.json", import.meta.url), "utf8")) as { cases: { what: string; key: string; model: string; conversation_id: string; affinity_id: string; request_type: string; disagg_request_id: string; signature: string }[] };
    const c = vectors.cases.find((v) => v.what.startsWith("a 63-bit"))!;
    const { g, log } = await gateway(true, c.key);
    // The body as TensorRT-LLM's edge writes it: the id as digits, which JSON.stringify of a number could not keep.
    const body = `{"model":${JSON.stringify(c.model)},"messages":[{"role":"user","content":"hi"}],"conversation_params":{"conversation_id":${JSON.stringify(c.conversation_id)}},"disaggregated_params":{"request_type":${JSON.stringify(c.request_type)},"disagg_request_id":${c.disagg_request_id}}}`;
    const response = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-trtllm-subagent-affinity-id": c.affinity_id, "x-trtllm-subagent-affinity-auth": c.signature }, body });
    await response.text();
    expect(response.status).toBe(200);
    expect(bound(log)).toEqual([c.affinity_id]);
    expect(refused(g)).toBe(0);
  });

  it("without the key the hint is taken as sent", async () => {
    const { g, log } = await gateway(false);
    await turn(g, "child-1", {});
    expect(bound(log)).toEqual(["parent"]);
    expect(refused(g)).toBe(0);
  });
});
