// TensorRT-LLM's signed sub-agent affinity (PR #19175): the gateway's
// signature equals the one TensorRT-LLM's own _sign_subagent_affinity makes
// (test/fixtures/subagent-auth.json, by scripts/subagent-auth-vectors.py), and
// a hint is taken only on context or generation requests with that signature.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadGatewayConfig } from "../../gateway/src/config/config.js";
import { pythonJson, subagentHintAccepted, subagentSignature, type SubagentClaim } from "../../gateway/src/requests/subagent-auth.js";

const vectors = JSON.parse(readFileSync(new URL("../fixtures/subagent-auth.json", import.meta.url), "utf8")) as {
  cases: { what: string; key: string; model: string; conversation_id: string | null; affinity_id: string; request_type: string; disagg_request_id: string | null; signature: string }[];
};
const claimOf = (c: (typeof vectors.cases)[number]): SubagentClaim => ({ affinityId: c.affinity_id, model: c.model, conversationId: c.conversation_id, requestType: c.request_type, disaggRequestId: c.disagg_request_id });

describe("sub-agent affinity signatures, as TensorRT-LLM signs them", () => {
  for (const c of vectors.cases) {
    it(`${c.what}: the same signature, accepted; any change refused`, () => {
      const role = c.request_type === "context_only" ? "CONTEXT" : "GENERATION";
      expect(subagentSignature(c.key, claimOf(c), role)).toBe(c.signature);
      expect(subagentHintAccepted(c.key, claimOf(c), c.signature)).toBe(true);
      expect(subagentHintAccepted(`${c.key}x`, claimOf(c), c.signature)).toBe(false);
      expect(subagentHintAccepted(c.key, { ...claimOf(c), affinityId: `${c.affinity_id}x` }, c.signature)).toBe(false);
      expect(subagentHintAccepted(c.key, { ...claimOf(c), conversationId: "another" }, c.signature)).toBe(false);
      expect(subagentHintAccepted(c.key, claimOf(c), null)).toBe(false);
      expect(subagentHintAccepted(c.key, claimOf(c), c.signature.slice(0, -1))).toBe(false);
    });
  }

  it("an aggregated request's hint is never taken, whatever it carries", () => {
    const c = vectors.cases[0]!;
    const aggregated = { ...claimOf(c), requestType: null, disaggRequestId: null };
    expect(subagentHintAccepted(c.key, aggregated, subagentSignature(c.key, aggregated, "CONTEXT"))).toBe(false);
  });

  it("writes JSON as Python's json.dumps(sort_keys=True, separators=(',', ':')) does", () => {
    expect(pythonJson({ b: 1, a: [null, "é😀\u2028", true], c: "x\n\u007f" })).toBe('{"a":[null,"\\u00e9\\ud83d\\ude00\\u2028",true],"b":1,"c":"x\\n\\u007f"}');
  });
});

describe("setting files given to the configuration (serve --workers N's primary sends its own)", () => {
  it("a file read is recorded in settingFiles; one given there is taken in place of the file, whatever the file holds", () => {
    const dir = mkdtempSync(join(tmpdir(), "adp-setting-files-"));
    const key = join(dir, "key");
    writeFileSync(key, "the first key\n");
    const text = `upstreams: [http://127.0.0.1:1]\nauth: { internal_request_auth_key_file: ${key} }\n`;
    const settingFiles = new Map<string, string>();
    expect(loadGatewayConfig({ file: { name: "g.yaml", text }, settingFiles }).auth.internalRequestAuthKey).toBe("the first key");
    expect([...settingFiles]).toEqual([[key, "the first key"]]);
    writeFileSync(key, "a later key\n");
    expect(loadGatewayConfig({ file: { name: "g.yaml", text }, settingFiles: new Map(settingFiles) }).auth.internalRequestAuthKey).toBe("the first key");
    expect(loadGatewayConfig({ file: { name: "g.yaml", text } }).auth.internalRequestAuthKey).toBe("a later key");
    rmSync(dir, { recursive: true });
  });
});
