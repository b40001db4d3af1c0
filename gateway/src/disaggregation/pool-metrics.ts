// The metrics of a disaggregated gateway's two pools as one Prometheus page:
// each pool renders its fleet as an aggregated gateway does, and the families
// are merged here, every sample labelled with its pool (pool="prefill" or
// pool="decode") and each family's HELP and TYPE written once, as the text
// format requires.

/** One family's header lines and samples, in the order they came. */
interface Family {
  readonly header: string[];
  readonly samples: string[];
}

/** `line`, a sample, with `label` (`pool="prefill"`) first among its labels. */
function labelled(line: string, label: string): string {
  const brace = line.indexOf("{");
  const space = line.indexOf(" ");
  if (brace !== -1 && (space === -1 || brace < space)) return line[brace + 1] === "}" ? `${line.slice(0, brace)}{${label}${line.slice(brace + 1)}` : `${line.slice(0, brace + 1)}${label},${line.slice(brace + 1)}`;
  return space === -1 ? line : `${line.slice(0, space)}{${label}}${line.slice(space)}`;
}

/** Several pools' Prometheus texts as one: families in the order first seen, each sample labelled with its pool (pool null: the gateway's own, unlabelled). */
export function mergePoolMetrics(parts: readonly { readonly pool: string | null; readonly text: string }[]): string {
  const families = new Map<string, Family>();
  const familyOf = (name: string) => {
    let f = families.get(name);
    if (f === undefined) families.set(name, (f = { header: [], samples: [] }));
    return f;
  };
  for (const { pool, text } of parts) {
    const label = pool === null ? null : `pool="${pool}"`;
    let current: Family | null = null;
    let first = false;
    for (const line of text.split("\n")) {
      if (line === "") continue;
      const meta = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (meta !== null) {
        first = !families.has(meta[2]!) || (current === families.get(meta[2]!) && first);
        current = familyOf(meta[2]!);
        if (first) current.header.push(line);
        continue;
      }
      if (line.startsWith("#")) continue;
      (current ?? familyOf(line.split(/[{ ]/, 1)[0]!)).samples.push(label === null ? line : labelled(line, label));
    }
  }
  let out = "";
  for (const f of families.values()) out += [...f.header, ...f.samples].join("\n") + "\n";
  return out;
}
