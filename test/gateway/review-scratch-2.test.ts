import { connect, createServer, type AddressInfo, type Socket } from "node:net";
import { afterEach, describe, it } from "vitest";
import { createGateway } from "../../gateway/src/index.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => { await Promise.all(open.splice(0).map((o) => o.close())); });

async function raw(answer: (s: Socket, req: string) => void) {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s); s.on("error", () => {}); s.on("close", () => sockets.delete(s));
    let buf = "";
    s.on("data", (d) => { buf += d.toString("latin1"); for (;;) { const e = buf.indexOf("\r\n\r\n"); if (e < 0) return; const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, e))?.[1] ?? 0); if (buf.length < e + 4 + len) return; const req = buf.slice(0, e + 4 + len); buf = buf.slice(e + 4 + len); answer(s, req); } });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const u = { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => { for (const s of sockets) s.destroy(); return new Promise<void>((r) => server.close(() => r())); } };
  open.push(u); return u;
}
const okHealth = (s: Socket) => s.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");

async function slowClient(url: string, waitMs: number): Promise<string> {
  const { port } = new URL(url);
  const body = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });
  return new Promise((resolve) => {
    const s = connect(Number(port), "127.0.0.1");
    const chunks: Buffer[] = [];
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    s.pause();
    setTimeout(() => s.resume(), waitMs);
    s.on("data", (d) => { chunks.push(d); if (waitMs > 0) { s.pause(); setTimeout(() => s.resume(), 2); } });
    s.on("close", () => resolve(Buffer.concat(chunks).toString("latin1")));
    s.on("error", () => {});
  });
}

describe("review gateway", () => {
  it("G1 chunked SSE with connection: close to a slow client", async () => {
    const ev = "data: " + JSON.stringify({ choices: [{ delta: { content: "x".repeat(900) } }] }) + "\n\n";
    const up = await raw((s, req) => {
      if (req.startsWith("GET")) return okHealth(s);
      let out = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
      for (let i = 0; i < 3000; i++) out += `${ev.length.toString(16)}\r\n${ev}\r\n`;
      const done = "data: [DONE]\n\n";
      out += `${done.length.toString(16)}\r\n${done}\r\n0\r\n\r\n`;
      s.end(out);
    });
    const g = await createGateway({ logging: { level: "silent" }, listen: { port: 0 }, upstreams: [up.origin], health: { interval_ms: 60_000 } });
    open.push({ close: () => g.close(2000) });
    const got = await slowClient(g.url, 300);
    console.log("G1 bytes", got.length, "tail", JSON.stringify(got.slice(-300)));
  }, 20000);
  it("G2 close-delimited JSON to a slow client", async () => {
    const json = JSON.stringify({ choices: [{ message: { content: "y".repeat(3_000_000) } }] });
    const up = await raw((s, req) => {
      if (req.startsWith("GET")) return okHealth(s);
      s.end("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + json);
    });
    const g = await createGateway({ logging: { level: "silent" }, listen: { port: 0 }, upstreams: [up.origin], health: { interval_ms: 60_000 } });
    open.push({ close: () => g.close(2000) });
    const got = await slowClient(g.url, 300);
    const i = got.indexOf("\r\n\r\n");
    console.log("G2 head", JSON.stringify(got.slice(0, i)), "total", got.length, "json", json.length, "tail", JSON.stringify(got.slice(-40)));
  }, 20000);
});
