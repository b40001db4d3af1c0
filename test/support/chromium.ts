// Headless Debian Chromium for tests, via playwright-core (nothing downloaded).
// Tests that need it skip with a clear message where it is not installed.
import { existsSync } from "node:fs";

/** The Chromium binary: $CHROMIUM_PATH or Debian's /usr/bin/chromium. */
export const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Whether Chromium is installed here. */
export const hasChromium = existsSync(chromiumPath);
/** Why browser tests are skipped, when they are. */
export const skipReason = `Chromium not found at ${chromiumPath} (install Debian's chromium package or set CHROMIUM_PATH); browser tests skipped`;

/** Launches headless Chromium with the flags this machine needs. */
export async function launchChromium() {
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}
