// Embedding the gateway: the server `adp-router-gateway serve` runs, started from code.
//
//   PORT=8000 node examples/gateway/gateway.mjs http://127.0.0.1:8001 http://127.0.0.1:8002
//
// createGateway takes the settings as the YAML file writes them (checked by the
// same rules: a GatewayConfigError lists every problem), listens, and resolves
// with the URL. SIGTERM (an orchestrator stopping it) or SIGINT (Ctrl-C) drains:
// no new request is taken, those in flight finish (up to 30 s), then it exits.
import { createGateway } from "adp-router-gateway";

const gateway = await createGateway({
  upstreams: process.argv.slice(2),
  listen: { port: Number(process.env.PORT ?? 8000) },
  policy: "kv_cache_aware",
});
console.log(gateway.url);
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.once(signal, () => {
    console.error(`${signal}: draining`);
    void gateway.close(30_000).then(() => process.exit(0));
  });
}
