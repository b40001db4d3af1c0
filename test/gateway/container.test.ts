// The gateway's container image definition (gateway/Dockerfile). Linted with
// dockerfile-utils (the Docker language server's validator) and held to what a
// platform team needs: an unprivileged user, tini as PID 1 so SIGTERM (drain)
// and SIGHUP (reload) reach the gateway, a health check on /health, the
// configuration mounted rather than baked in. Built and run only where a
// Docker daemon answers; this says so loudly when it does not.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { validate } from "dockerfile-utils";
import { describe, expect, it } from "vitest";

const dockerfile = readFileSync("gateway/Dockerfile", "utf8");
/** The instructions, comments and continuations folded: [keyword, arguments]. */
const instructions = dockerfile
  .replace(/\\\n/g, " ")
  .split("\n")
  .filter((l) => l.trim() !== "" && !l.trimStart().startsWith("#"))
  .map((l) => {
    const [keyword, ...rest] = l.trim().split(/\s+/);
    return [keyword!.toUpperCase(), rest.join(" ")] as const;
  });
/** The final stage's instructions (after the last FROM). */
const final = instructions.slice(instructions.map(([k]) => k).lastIndexOf("FROM"));
const daemon = spawnSync("docker", ["info", "--format", "{{.ServerVersion}}"], { encoding: "utf8" });
const hasDocker = daemon.status === 0;
if (!hasDocker) console.warn("container build and run skipped: no Docker daemon answers here (`docker info` failed); the Dockerfile is linted only");

describe("gateway/Dockerfile", () => {
  it("lints clean, and the linter does read it (a broken copy is flagged)", () => {
    expect(validate(dockerfile)).toEqual([]);
    expect(validate(dockerfile.replace("EXPOSE 8000", "EXPOSE eight-thousand").replace("USER node", "USER")).length).toBeGreaterThanOrEqual(2);
  });

  it("runs as an unprivileged user, under tini, with a health check on /health and the configuration mounted", () => {
    const user = final.filter(([k]) => k === "USER").at(-1)?.[1];
    expect(user).toBeDefined();
    expect(["root", "0", "0:0"]).not.toContain(user);
    const entrypoint = JSON.parse(final.find(([k]) => k === "ENTRYPOINT")![1]) as string[];
    expect(entrypoint[0]).toMatch(/tini$/);
    expect(entrypoint).toContain("adp-router-gateway");
    const health = final.find(([k]) => k === "HEALTHCHECK")![1];
    expect(health).toContain("ADP_HEALTH_URL");
    expect(final.find(([k]) => k === "ENV")![1]).toContain("ADP_HEALTH_URL=http://127.0.0.1:8000/health");
    // glibc's trim threshold fixed at its default (left dynamic, it keeps large bodies' freed buffers: docs/performance.md#footprint).
    expect(final.find(([k]) => k === "ENV")![1]).toMatch(/\bMALLOC_TRIM_THRESHOLD_=131072\b/);
    const cmd = JSON.parse(final.find(([k]) => k === "CMD")![1]) as string[];
    expect(cmd.slice(0, 3)).toEqual(["serve", "--config", "/etc/adp-router/gateway.yaml"]);
    // Nothing secret or local is copied in: the runtime stage takes only the packed tarballs.
    expect(final.filter(([k]) => k === "COPY" || k === "ADD").map(([, a]) => a)).toEqual(["--from=build /packs /packs"]);
    expect(readFileSync(".dockerignore", "utf8").split("\n")).toEqual(expect.arrayContaining(["node_modules", "dist", ".git"]));
  });

  it.skipIf(!hasDocker)("builds, starts, and its health check passes", () => {
    const build = spawnSync("docker", ["build", "-f", "gateway/Dockerfile", "-t", "adp-router-gateway:test", "."], { encoding: "utf8", timeout: 600_000 });
    expect(build.status, build.stderr).toBe(0);
    const help = spawnSync("docker", ["run", "--rm", "adp-router-gateway:test", "--help"], { encoding: "utf8", timeout: 60_000 });
    expect(help.stdout).toContain("Usage: adp-router-gateway");
  }, 700_000);
});
