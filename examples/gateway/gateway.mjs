// Embedding the gateway: the server `adp-router serve` runs, started from code.
//
//   PORT=8000 node examples/gateway/gateway.mjs http://127.0.0.1:8001 http://127.0.0.1:8002
//
// loadGatewayConfig takes the same settings as the CLI (flags, or a YAML file's
// text); createGateway listens and resolves with the URL.
import { createGateway, loadGatewayConfig } from "adp-router/serve";

const config = loadGatewayConfig({ flags: { upstreams: process.argv.slice(2), port: Number(process.env.PORT ?? 8000), policy: "kv_cache_aware" } });
const gateway = await createGateway(config);
console.log(gateway.url);
process.once("SIGINT", () => void gateway.close(10_000).then(() => process.exit(0)));
