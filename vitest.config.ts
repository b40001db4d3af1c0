import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { playwright } from "@vitest/browser-playwright";
import { defineConfig } from "vitest/config";

const chromium = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const hasChromium = existsSync(chromium);

/** Suites that run unchanged in the browser: the routers, the index, conformance, the engines' tokenizers. */
const browserSuites = [
  "test/mt19937.test.ts",
  "test/core-loops.test.ts",
  "test/routers.test.ts",
  "test/config.test.ts",
  "test/balance-gate.test.ts",
  "test/bad-input.test.ts",
  "test/conformance.test.ts",
  "test/conformance-instances.test.ts",
  "test/cross-engine.test.ts",
  "test/prefix-index-cases.test.ts",
  "test/prefix-index.test.ts",
  "test/prefix-index.property.test.ts",
  "test/kv-events.test.ts",
  "test/observability.test.ts",
  "test/snapshot.test.ts",
  "test/hostile-input.test.ts",
  "test/gateway/hf-tokenizer.test.ts",
];

if (!hasChromium) {
  console.warn(`browser suite skipped: no Chromium at ${chromium} (install Debian's chromium package or set CHROMIUM_PATH)`);
}

export default defineConfig({
  // The gateway imports the library by its package name; the tests run both from their sources, one copy of each class.
  resolve: {
    alias: [
      { find: /^adp-router$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      { find: /^adp-router\/prometheus$/, replacement: fileURLToPath(new URL("./src/prometheus.ts", import.meta.url)) },
      { find: /^adp-router\/engine-cache$/, replacement: fileURLToPath(new URL("./src/engine-cache-entry.ts", import.meta.url)) },
    ],
  },
  test: {
    testTimeout: 60_000,
    reporters: ["default", "./test/support/summary-reporter.ts"],
    globalSetup: ["./test/support/node-answers.setup.ts"],
    projects: [
      { extends: true, test: { name: "node", include: ["test/**/*.test.ts"], pool: "forks" } },
      ...(hasChromium
        ? [
            {
              extends: true,
              test: {
                name: "chromium",
                include: browserSuites,
                browser: {
                  enabled: true,
                  headless: true,
                  screenshotFailures: false,
                  instances: [{ browser: "chromium" as const }],
                  provider: playwright({
                    launchOptions: {
                      executablePath: chromium,
                      args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
                    },
                  }),
                },
              },
            },
          ]
        : []),
    ],
  },
});
