// Embedding the gateway: the server `adp-router serve` runs, started from code.
//
//   PORT=8000 node examples/gateway/gateway.mjs http://127.0.0.1:8001 http://127.0.0.1:8002
//
// createGateway takes the settings as the YAML file writes them (checked by the
// same rules: a GatewayConfigError lists every problem), listens, and resolves
// with the URL.
import { createGateway } from "adp-router/serve";

const gateway = await createGateway({
  upstreams: process.argv.slice(2),
  listen: { port: Number(process.env.PORT ?? 8000) },
  policy: "kv_cache_aware",
});
console.log(gateway.url);
process.once("SIGINT", () => void gateway.close(10_000).then(() => process.exit(0)));
