// Several Prometheus pages as one, each sample labelled with the page it came
// from: a disaggregated gateway's two pools (pool="prefill", pool="decode"),
// each rendering its fleet as an aggregated gateway does, and the workers of
// `serve --workers N` (worker="1", ...). Each family's HELP and TYPE are
// written once and its samples kept together, as the text format requires.

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

/** Several Prometheus texts as one: families in the order first seen, each sample labelled with its page's `label` (`pool="prefill"`; null: left as it is). */
export function mergeLabelled(parts: readonly { readonly label: string | null; readonly text: string }[]): string {
  const families = new Map<string, Family>();
  const familyOf = (name: string) => {
    let f = families.get(name);
    if (f === undefined) families.set(name, (f = { header: [], samples: [] }));
    return f;
  };
  for (const { label, text } of parts) {
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
