// A minimal OpenAI-style gateway in front of several upstream ranks (or engine
// instances), routed by adp-router. No framework: node:http and fetch.
//
//   node examples/gateway/gateway.mjs http://127.0.0.1:8001 http://127.0.0.1:8002
//
// Conversation ids come from the body's `conversation_params.conversation_id`, or
// else the first of the headers x-session-id, x-correlation-id, x-session-affinity,
// x-multi-turn-session-id (as TensorRT-LLM's serve edge does; the body wins).
// Prompts are tokenized as UTF-8 bytes, which is enough for prefix affinity
// (equal prompt prefixes give equal token prefixes); swap in your tokenizer.
// The gateway tracks each upstream's active requests and prompt tokens and
// reports them to the router as its rank states. By default it pins conversations
// (conversation affinity, least_tokens placement for new ones); pass
// `attentionDp: { enable_kv_cache_aware_routing: true }` to route by prefix
// affinity instead. GET /metrics serves Prometheus text, GET /ranks the loads.

import { createServer } from "node:http";
import { createRouter } from "adp-router";
import { formatPrometheus } from "adp-router/prometheus";

const SESSION_HEADERS = ["x-session-id", "x-correlation-id", "x-session-affinity", "x-multi-turn-session-id"];
const encoder = new TextEncoder();

/** The conversation id of a request: the body's, else the first session header's. */
export function conversationIdOf(body, headers) {
  const params = body?.conversation_params;
  if (params !== undefined && params !== null) {
    const id = params.conversation_id;
    const text = id === null || id === undefined ? "" : String(id).trim();
    if (text === "") throw Object.assign(new Error("conversation_id must be non-empty"), { status: 400 });
    return text;
  }
  for (const name of SESSION_HEADERS) {
    const value = headers[name];
    const text = (Array.isArray(value) ? value[0] : value)?.trim();
    if (text) return text;
  }
  return null;
}

/** The prompt text of a chat or completion request. */
function promptOf(body) {
  if (Array.isArray(body.messages)) {
    return body.messages.map((m) => `<${m.role}>${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("");
  }
  return typeof body.prompt === "string" ? body.prompt : JSON.stringify(body.prompt ?? "");
}

/**
 * Creates the gateway server (not yet listening).
 * @param {{ upstreams: string[], attentionDp?: object, maxActivePerUpstream?: number, tokensPerBlock?: number }} options
 */
export function createGateway({
  upstreams,
  attentionDp = { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: "least_tokens" },
  maxActivePerUpstream = 256,
  tokensPerBlock = 64,
}) {
  const router = createRouter({ numRanks: upstreams.length, attentionDp, prefixIndex: { tokensPerBlock, maxMemoryBytes: 64 << 20 } });
  const active = upstreams.map(() => 0);
  const activeTokens = upstreams.map(() => 0);
  let nextId = 1;

  const server = createServer(async (req, res) => {
    try {
      if (req.method === "GET" && req.url === "/metrics") {
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(formatPrometheus(router.metrics()));
        return;
      }
      if (req.method === "GET" && req.url === "/ranks") {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ active, activeTokens }));
        return;
      }
      if (req.method !== "POST" || !/^\/v1\/(chat\/)?completions$/.test(req.url ?? "")) {
        res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "not found" } }));
        return;
      }
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const raw = Buffer.concat(chunks);
      const body = JSON.parse(raw.toString("utf8"));
      const conversationId = conversationIdOf(body, req.headers);
      const tokens = encoder.encode(promptOf(body));
      const id = nextId++;
      const { assignments } = router.route({
        rankStates: active.map((n, r) => ({ numActiveRequests: n, numActiveTokens: activeTokens[r] })),
        maxNumActiveRequests: maxActivePerUpstream,
        requests: [{ id, tokens, ...(conversationId ? { conversationId } : {}) }],
      });
      const rank = assignments.findIndex((ids) => ids.length > 0);
      if (rank < 0) {
        res.writeHead(503, { "content-type": "application/json", "retry-after": "1" }).end(JSON.stringify({ error: { message: "all upstreams are full" } }));
        return;
      }
      active[rank]++;
      activeTokens[rank] += tokens.length;
      try {
        const upstream = await fetch(new URL(req.url, upstreams[rank]), {
          method: "POST",
          headers: { "content-type": "application/json", ...(conversationId ? { "x-session-id": conversationId } : {}) },
          body: raw,
        });
        res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json", "x-adp-rank": String(rank) });
        if (upstream.body) for await (const chunk of upstream.body) res.write(chunk);
        res.end();
      } finally {
        active[rank]--;
        activeTokens[rank] -= tokens.length;
      }
    } catch (error) {
      if (!res.headersSent) {
        res.writeHead(error.status ?? (error instanceof SyntaxError || error.code === "ERR_ADP_INPUT" ? 400 : 502), { "content-type": "application/json" });
      }
      res.end(JSON.stringify({ error: { message: error.message } }));
    }
  });
  return { server, router, active, activeTokens };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const upstreams = process.argv.slice(2);
  if (upstreams.length === 0) {
    console.error("usage: node examples/gateway/gateway.mjs UPSTREAM_URL [UPSTREAM_URL ...]");
    process.exitCode = 2;
  } else {
    const port = Number(process.env.PORT ?? 8000);
    createGateway({ upstreams }).server.listen(port, "127.0.0.1", () => console.log(`gateway on http://127.0.0.1:${port} → ${upstreams.join(", ")}`));
  }
}
