// JSON with every digit of its long integers: engines' uint64 block hashes,
// TensorRT-LLM's 63-bit request ids. Shared by the rooms that read them
// (events: polled KV events; requests: a signed sub-agent hint's request id).

/**
 * JSON.parse, but integers too long for a double's exact range (uint64 block
 * hashes) come back as decimal strings, which the index takes as hashes with
 * every bit: `JSON.parse` alone would round 17293822569102704641 and merge
 * distinct blocks. Node 20's JSON.parse has no access to a number's source.
 */
export function parseJsonKeepingIntegers(text: string): unknown {
  let out = "";
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) {
      inString = true;
      continue;
    }
    if (c !== 0x2d && (c < 0x30 || c > 0x39)) continue;
    let j = i + 1;
    while (j < text.length && /[0-9.eE+-]/.test(text[j]!)) j++;
    const token = text.slice(i, j);
    // 15 digits are exact in a double whatever they are; longer integers are kept as text.
    if (/^-?\d{16,}$/.test(token)) {
      out += `${text.slice(from, i)}"${token}"`;
      from = j;
    }
    i = j - 1;
  }
  return JSON.parse(from === 0 ? text : out + text.slice(from));
}
