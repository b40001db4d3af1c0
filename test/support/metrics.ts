// The gateway labels upstreams by name; its tests often know them by index.
// `metricsByIndex` rewrites a /metrics text's `upstream="NAME"` labels to
// `upstream="INDEX"` (from the upstream_info lines), so a test can ask for
// `upstream="1"` whatever the engine's port made its name.

/** The metrics text with each upstream label its index in the fleet now. */
export function metricsByIndex(text: string): string {
  const index = new Map<string, string>();
  for (const m of text.matchAll(/^adp_gateway_upstream_info\{upstream="((?:[^"\\]|\\.)*)",index="(\d+)"/gm)) index.set(m[1]!, m[2]!);
  return text.replace(/upstream="((?:[^"\\]|\\.)*)"/g, (all, name: string) => (index.has(name) ? `upstream="${index.get(name)}"` : all));
}
