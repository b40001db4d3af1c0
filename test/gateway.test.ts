// The gateway example against mock upstreams on 127.0.0.1, with a real HTTP client.
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

type Gateway = { server: Server; active: number[]; activeTokens: number[] };
const listen = (server: Server) => new Promise<string>((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}`)));

describe("examples/gateway", () => {
  const upstreams: Server[] = [];
  const upstreamUrls: string[] = [];
  let gateway: Gateway;
  let url = "";
  const seenSessions: (string | undefined)[][] = [[], [], []];

  beforeAll(async () => {
    for (let i = 0; i < 3; i++) {
      const s = createServer(async (req, res) => {
        let body = "";
        for await (const c of req) body += c;
        seenSessions[i]!.push(req.headers["x-session-id"] as string | undefined);
        await new Promise((r) => setTimeout(r, 5));
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ upstream: i, model: JSON.parse(body).model }));
      });
      upstreams.push(s);
      upstreamUrls.push(await listen(s));
    }
    // @ts-expect-error the example is plain JavaScript
    const { createGateway } = await import("../examples/gateway/gateway.mjs");
    gateway = createGateway({ upstreams: upstreamUrls }) as Gateway;
    url = await listen(gateway.server);
  });
  afterAll(() => {
    gateway?.server.close();
    for (const s of upstreams) s.close();
  });

  const chat = async (content: string, init: { headers?: Record<string, string>; conversation?: unknown } = {}) => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...init.headers },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content }], ...(init.conversation !== undefined ? { conversation_params: init.conversation } : {}) }),
    });
    return { status: res.status, rank: Number(res.headers.get("x-adp-rank")), body: (await res.json()) as { upstream: number; error?: { message: string } } };
  };

  it("pins a conversation to one upstream, from the body or from the session headers (body wins)", async () => {
    const first = await chat("hello there", { conversation: { conversation_id: "conv-1" } });
    expect(first.status).toBe(200);
    expect(first.body.upstream).toBe(first.rank);
    for (let turn = 0; turn < 4; turn++) {
      const next = await chat(`hello there, turn ${turn}`, { conversation: { conversation_id: "conv-1" }, headers: { "x-session-id": "other" } });
      expect(next.body.upstream).toBe(first.rank);
    }
    const byHeader = await chat("header only", { headers: { "X-Correlation-Id": "conv-h" } });
    const again = await chat("header only again", { headers: { "x-session-id": "  ", "x-correlation-id": "conv-h" } });
    expect(again.body.upstream).toBe(byHeader.body.upstream);
    expect(seenSessions[byHeader.body.upstream]).toContain("conv-h");
  });

  it("rejects an empty body conversation id like TensorRT-LLM's serve edge, and bad JSON", async () => {
    expect((await chat("x", { conversation: { conversation_id: "   " } })).status).toBe(400);
    const res = await fetch(`${url}/v1/completions`, { method: "POST", body: "{not json" });
    expect(res.status).toBe(400);
  });

  it("spreads id-less concurrent requests, tracks active load back to zero, serves metrics", async () => {
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => chat(`independent prompt number ${i} ${"x".repeat(i * 7)}`)));
    const perUpstream = [0, 1, 2].map((u) => results.filter((r) => r.body.upstream === u).length);
    expect(Math.min(...perUpstream)).toBeGreaterThan(0);
    expect(gateway.active).toEqual([0, 0, 0]);
    expect(gateway.activeTokens).toEqual([0, 0, 0]);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/adp_router_decisions_total\{router="conversation",outcome="placed"\} \d+/);
  });
});
