// Checking that bad options are refused the way the project promises: a typed
// AdpInputError naming the option in the library, exit status 2 and the flag's
// name (nothing on standard output) in the CLI.

import { spawnSync } from "node:child_process";
import { expect } from "vitest";
import { AdpInputError } from "../../src/index.js";

/** Expects `run(options)` to throw an AdpInputError naming `field`, for each case. */
export function expectRefusals<T>(run: (options: T) => unknown, cases: readonly (readonly [T, string])[]): void {
  for (const [options, field] of cases) {
    let error: unknown;
    try {
      run(options);
    } catch (e) {
      error = e;
    }
    expect(error, JSON.stringify(options)).toBeInstanceOf(AdpInputError);
    expect((error as AdpInputError).field, JSON.stringify(options)).toBe(field);
  }
}

/** Expects the CLI (`cli ...args ...flags`) to exit 2 with `message` on standard error and nothing on standard output, for each case. */
export function expectCliRefusals(cli: string, args: readonly string[], cases: readonly (readonly [string[], string])[]): void {
  for (const [flags, message] of cases) {
    const out = spawnSync(process.execPath, [cli, ...args, ...flags], { encoding: "utf8" });
    expect(out.status, flags.join(" ")).toBe(2);
    expect(out.stderr, flags.join(" ")).toContain(message);
    expect(out.stdout, flags.join(" ")).toBe("");
  }
}
