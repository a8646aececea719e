/**
 * Finding the local backbone `npm start` runs: its home directory (`PARLEY_HOME`, else the nearest
 * `.parley` in the working directory or above), the admin creds in it, and the `run.json` it writes while it runs (where NATS and HTTP listen).
 * The CLI, `parley mcp` and `connect()` without arguments use this, so a backbone started with
 * `--home` or `--nats-port` is found without repeating its flags.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import * as z from 'zod';

/** The NATS URL used when nothing else names one. */
export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

/** What a running `npm start` writes to `<home>/run.json` (and removes when it stops). */
export const LocalRun = z.object({
  /** The Node process that runs the backbone. */
  pid: z.int(),
  /** The nats-server child it started (absent when it uses servers run by someone else). */
  natsPid: z.int().optional(),
  natsUrl: z.string(),
  httpUrl: z.string(),
  home: z.string(),
  startedAt: z.string(),
});
export type LocalRun = z.infer<typeof LocalRun>;

/** The environment variables this module reads (listed by `parley --help`). */
export const localEnvironment = {
  PARLEY_HOME:
    'the local backbone’s home (keys, creds, run.json); default: the nearest .parley here or above',
  NATS_URL:
    'NATS server URL(s), comma-separated; default: where npm start runs (run.json), else nats://127.0.0.1:4222',
} as const;

/**
 * The home directory: `PARLEY_HOME` (relative to `cwd`), else the nearest `.parley` holding a local
 * admin's creds in `cwd` or a directory above it (so the CLI works from anywhere in the checkout
 * `npm start` runs in), else `<cwd>/.parley`. A `.parley` without admin creds (`~/.parley`, where
 * `parley connect` keeps agents' creds) is not a backbone's home and is passed over.
 */
export function localHome(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): string {
  if (env.PARLEY_HOME) return resolve(cwd, env.PARLEY_HOME);
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    if (existsSync(join(dir, '.parley', 'creds', 'admin.creds'))) return join(dir, '.parley');
    if (dirname(dir) === dir) break;
  }
  return join(cwd, '.parley');
}

/** Where the run information of a home is. */
export function runFile(home: string): string {
  return join(home, 'run.json');
}

/** The run information of `home`, or undefined when it has none (not running, or never started). */
export function readLocalRun(home: string): LocalRun | undefined {
  let text: string;
  try {
    text = readFileSync(runFile(home), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const parsed = LocalRun.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** The local backbone as the environment and the home describe it. */
export interface LocalBackbone {
  home: string;
  /** The local admin's creds file (it may not exist). */
  adminCreds: string;
  /** The NATS URL to use: `NATS_URL`, else run.json's, else {@link DEFAULT_NATS_URL}. */
  natsUrl: string;
  /** Where the URL came from, for error messages. */
  natsUrlFrom: 'NATS_URL' | 'run.json' | 'default';
  /** The run information, when the backbone of this home runs (or crashed without removing it). */
  run: LocalRun | undefined;
}

/** Resolves the local backbone: `PARLEY_HOME`, then `./.parley`; `NATS_URL` overrides the URL. */
export function localBackbone(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): LocalBackbone {
  const home = localHome(env, cwd);
  const run = readLocalRun(home);
  const fromEnv = env.NATS_URL?.trim();
  const [natsUrl, natsUrlFrom] = fromEnv
    ? ([fromEnv, 'NATS_URL'] as const)
    : run
      ? ([run.natsUrl, 'run.json'] as const)
      : ([DEFAULT_NATS_URL, 'default'] as const);
  return { home, adminCreds: join(home, 'creds', 'admin.creds'), natsUrl, natsUrlFrom, run };
}
