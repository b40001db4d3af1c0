import { createServer, type AddressInfo, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AnswerParser } from "../../gateway/src/http1/answer-parser.js";
import { Http1Pool, type AnswerController, type AnswerHandler, type RequestOptions } from "../../gateway/src/http1/http1-pool.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => { await Promise.all(open.splice(0).map((o) => o.close())); });

async function raw(answer: (s: Socket, n: number) => void) {
  let n = 0; const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s); s.on("error", () => {}); s.on("close", () => sockets.delete(s));
    let buf = "";
    s.on("data", (d) => { buf += d.toString("latin1"); for (;;) { const e = buf.indexOf("\r\n\r\n"); if (e < 0) return; const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, e))?.[1] ?? 0); if (buf.length < e + 4 + len) return; buf = buf.slice(e + 4 + len); answer(s, n++); } });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const u = { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => { for (const s of sockets) s.destroy(); return new Promise<void>((r) => server.close(() => r())); } };
  open.push(u); return u;
}
const POST: RequestOptions = { path: "/x", method: "POST", headers: {}, body: Buffer.from("{}") };
function pool(origin: string) { const p = new Http1Pool(origin, { connectTimeoutMs: 2000, keepAliveMs: 4000 }); open.push({ close: () => p.destroy() }); return p; }
function send(p: Http1Pool, h: Partial<AnswerHandler> = {}, opts = POST): Promise<{ status: number; body: string; error: any; headers: any }> {
  return new Promise((resolve) => {
    const out = { status: 0, body: "", error: null as any, headers: null as any };
    p.dispatch(opts, {
      onRequestStart: (c, x) => h.onRequestStart?.(c, x),
      onResponseStart: (c, s, hd) => { out.status = s; out.headers = hd; h.onResponseStart?.(c, s, hd); },
      onResponseData: (c, d) => { out.body += d.toString("latin1"); h.onResponseData?.(c, d); },
      onResponseEnd: () => resolve(out),
      onResponseError: (_c, e) => { out.error = e; resolve(out); },
    });
  });
}
const timeout = (ms: number) => new Promise((r) => setTimeout(() => r("TIMEOUT"), ms));

describe("review", () => {
  it("E1 chunked answer whose last read has the terminator, upstream closes, handler paused", async () => {
    const up = await raw((s) => s.end("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"));
    const r = await send(pool(up.origin), { onResponseData: (c) => { c.pause(); setTimeout(() => c.resume(), 50); } });
    console.log("E1", r.status, JSON.stringify(r.body), r.error?.code);
  });
  it("E2 close-delimited answer, handler paused on its last piece", async () => {
    const up = await raw((s) => s.end("HTTP/1.1 200 OK\r\n\r\nwhole body"));
    const r = await send(pool(up.origin), { onResponseData: (c) => { c.pause(); setTimeout(() => c.resume(), 50); } });
    console.log("E2", r.status, JSON.stringify(r.body), r.error?.code);
  });
  it("E3 resume() then pause() before the microtask loses bytes", async () => {
    const up = await raw((s) => s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n3\r\nghi\r\n0\r\n\r\n"));
    let first = true;
    const r = await Promise.race([send(pool(up.origin), { onResponseData: (c) => { if (!first) return; first = false; c.pause(); setTimeout(() => { c.resume(); c.pause(); setTimeout(() => c.resume(), 20); }, 20); } }), timeout(1500)]);
    console.log("E3", JSON.stringify(r));
  });
  it("E4 close() twice: the first never resolves", async () => {
    const up = await raw((s) => setTimeout(() => s.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"), 50));
    const p = new Http1Pool(up.origin, { connectTimeoutMs: 2000, keepAliveMs: 4000 });
    const inflight = send(p);
    await new Promise((r) => setTimeout(r, 10));
    let a = false, b = false;
    p.close().then(() => (a = true));
    p.close().then(() => (b = true));
    await inflight; await new Promise((r) => setTimeout(r, 200));
    console.log("E4 first resolved", a, "second resolved", b, p.connections);
    const p2 = new Http1Pool(up.origin, { connectTimeoutMs: 2000, keepAliveMs: 4000 });
    const inflight2 = send(p2);
    await new Promise((r) => setTimeout(r, 10));
    let c = false, d = false;
    p2.close().then(() => (c = true));
    p2.destroy().then(() => (d = true));
    await inflight2; await new Promise((r) => setTimeout(r, 200));
    console.log("E4b close resolved", c, "destroy resolved", d);
  });
  it("E5 __proto__ / constructor header names", async () => {
    const heads: any[] = [];
    const parser = new AnswerParser({ head: (_s, h) => heads.push(h), data: () => {} });
    parser.execute(Buffer.from("HTTP/1.1 200 OK\r\n__proto__: evil\r\nconstructor: x\r\ncontent-length: 0\r\n\r\n"));
    const h = heads[0];
    const names: string[] = []; for (const n in h) names.push(n);
    console.log("E5 for-in names", names, "proto is array", Array.isArray(Object.getPrototypeOf(h)), "constructor", h.constructor);
  });
  it("E6 pause in onRequestStart then abort: next request on the connection stalls", async () => {
    const up = await raw((s) => s.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
    const p = pool(up.origin);
    await send(p);
    const a = await send(p, { onRequestStart: (c) => { c.pause(); c.abort(new Error("stop")); } });
    console.log("E6 aborted", a.error?.message, p.connections);
    const r = await Promise.race([send(p), timeout(1000)]);
    console.log("E6 next", JSON.stringify(r));
  });
});
