// The configuration file under `serve --workers N`, read by the primary alone.
// Each worker read it itself, at its start and on SIGHUP, so workers could run
// different files: one started again after a crash read the file as edited
// since (its limits' shares then no longer added up to the gateway's, its
// upstreams were not its siblings'), and a reload read mid-write took in some
// workers and failed in others. Now the primary keeps the text the gateway
// started with and the last one a reload took; a worker asks for them before
// it starts, and a reload sends every worker the one text the primary read and
// checked. A worker started again so runs what its siblings run: the start's
// text, moved to the last reload's upstreams (what a reload changes; the rest
// waits for a restart of the whole gateway, as in its siblings), from before it
// listens (afterReload). The texts travel with the setting files the primary
// read for them (keys named by `*_file` settings), which a worker takes in
// place of the files: one started again after a key file changed runs the key
// its siblings run (a reload reads them again with the file, and changes what
// a reload changes). The answer also
// carries what its slot holds of the in-flight caps beyond or short of its
// share (lending-broker.ts): a worker asks whether or not the gateway has a
// file.

import { withUpstreams } from "../config/config.js";
import type { GatewayConfig, UpstreamConfig } from "../config/config-types.js";

/** The type of every configuration message between a worker and the primary. */
export const CONFIG_MESSAGE = "adp-gateway-config";
/** How long a starting worker waits for the primary's answer. */
export const CONFIG_TIMEOUT_MS = 10_000;
/** Most setting files a text carries (a configuration names a few a CURVE-keyed upstream). */
const MAX_SETTING_FILES = 4096;
/** Longest setting file text or name that crosses (the configuration's own bound on a setting file is 1 MiB). */
const MAX_SETTING_FILE_CHARS = 1 << 20;

/** Setting files as they cross: [name, text] pairs. */
export type SettingFilePairs = readonly (readonly [string, string])[];

/**
 * What a worker starts from: the file as the gateway started with it (null:
 * no file), the last reload's (null: none), the setting files the primary
 * read for each, and what its slot holds of the in-flight caps beyond its
 * share ([url, units] pairs, checked by carriedFrom).
 */
export interface ConfigTexts {
  readonly start: string | null;
  readonly reloaded: string | null;
  readonly startFiles: SettingFilePairs;
  readonly reloadedFiles: SettingFilePairs;
  readonly carried: unknown;
}

/** Whether `v` is a list of setting files within the bounds. */
export function isSettingFilePairs(v: unknown): v is SettingFilePairs {
  return Array.isArray(v) && v.length <= MAX_SETTING_FILES && v.every((p) => Array.isArray(p) && p.length === 2 && typeof p[0] === "string" && typeof p[1] === "string" && p[0].length <= MAX_SETTING_FILE_CHARS && p[1].length <= MAX_SETTING_FILE_CHARS);
}

/**
 * What a gateway started on `start` runs after a reload to `reloaded`:
 * `start`'s settings and `reloaded`'s upstreams, in its order, each one that
 * stayed (the first unmatched of `start`'s with its URL, as Fleet.reload
 * matches them) with its start's settings but for the three a reload changes
 * in it (its name, API key and drain: Upstream.update).
 */
export function afterReload(start: GatewayConfig, reloaded: GatewayConfig): GatewayConfig {
  const unused = new Map<string, UpstreamConfig[]>();
  for (const u of start.upstreams) unused.set(u.url, [...(unused.get(u.url) ?? []), u]);
  return withUpstreams(
    start,
    reloaded.upstreams.map((c) => {
      const kept = unused.get(c.url)?.shift();
      return kept === undefined ? c : { ...kept, name: c.name, apiKey: c.apiKey, drain: c.drain };
    }),
  );
}

/** A configuration message: a starting worker asks (`ask`); the primary answers with what it starts from (`texts`). */
export type ConfigMessage = { readonly type: typeof CONFIG_MESSAGE; readonly op: "ask" } | ({ readonly type: typeof CONFIG_MESSAGE; readonly op: "texts" } & ConfigTexts);

/** Whether `m` is a configuration message (checked whole: the channel is the primary's, but a message is data). */
export function isConfigMessage(m: unknown): m is ConfigMessage {
  if (typeof m !== "object" || m === null || (m as { type?: unknown }).type !== CONFIG_MESSAGE) return false;
  const x = m as Record<string, unknown>;
  if (x.op === "ask") return true;
  return x.op === "texts" && (x.start === null || typeof x.start === "string") && (x.reloaded === null || typeof x.reloaded === "string") && isSettingFilePairs(x.startFiles) && isSettingFilePairs(x.reloadedFiles) && Array.isArray(x.carried);
}

/** A configuration text with the setting files read for it. */
export interface ReadText {
  readonly text: string;
  readonly files: SettingFilePairs;
}

/** The primary's side: the gateway's configuration texts, and how a reload reads the next. */
export class ConfigKeeper {
  readonly #start: ReadText;
  readonly #read: (port: number | null) => Promise<ReadText>;
  #reloaded: ReadText | null = null;
  #generation = 0;

  /**
   * `start` is the text the gateway started with (and its setting files);
   * `read` reads the file again and checks it as a worker would take it (the
   * gateway's port, when known, for upstreams that would be the gateway
   * itself), resolving with its text and setting files or rejecting with
   * what is wrong with it.
   */
  constructor(start: ReadText, read: (port: number | null) => Promise<ReadText>) {
    this.#start = start;
    this.#read = read;
  }

  /** How many reloads were taken: a worker given the texts at an earlier one is sent the last when it starts listening. */
  get generation(): number {
    return this.#generation;
  }

  /** The last reload's text and setting files, or null. */
  get reloaded(): ReadText | null {
    return this.#reloaded;
  }

  /** The text the gateway started with, and its setting files. */
  get start(): ReadText {
    return this.#start;
  }

  /**
   * Reads the file for a reload (`port`: the gateway's, when known): its
   * text and setting files, kept as the ones workers started later move to;
   * rejects, keeping the last, when it is unreadable or wrong.
   */
  async reload(port: number | null): Promise<ReadText> {
    const read = await this.#read(port);
    this.#reloaded = read;
    this.#generation++;
    return read;
  }
}

/**
 * A worker's texts from its primary (`send` reaches it, `on`/`off` listen to
 * its messages); rejects after `timeoutMs` without an answer.
 */
export function askConfig(send: (m: ConfigMessage) => void, on: (listener: (m: unknown) => void) => void, off: (listener: (m: unknown) => void) => void, timeoutMs = CONFIG_TIMEOUT_MS): Promise<ConfigTexts> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off(listener);
      reject(new Error(`the primary did not send the configuration within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    const listener = (m: unknown) => {
      if (!isConfigMessage(m) || m.op !== "texts") return;
      clearTimeout(timer);
      off(listener);
      resolve({ start: m.start, reloaded: m.reloaded, startFiles: m.startFiles, reloadedFiles: m.reloadedFiles, carried: m.carried });
    };
    on(listener);
    send({ type: CONFIG_MESSAGE, op: "ask" });
  });
}
