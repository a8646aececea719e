/**
 * `parley doctor`: checks what a newcomer's local setup gets wrong, and says the fix for each: the
 * home in use, the creds (readable, accepted, whose), the server (reachable, its version and the
 * known defects that apply with what Parley does about each), the clock, the participant's inbox.
 * Exits non-zero when a check fails.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { decode } from '@nats-io/jwt';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  compareServerVersions,
  inboxStream,
  isParleyError,
  MIN_SERVER_VERSION,
  registryApi,
  request,
  serverDefects,
} from '@parley/contracts';
import type { Command } from 'commander';
import { connectWithCreds, readCreds } from '../../connect.js';
import { localBackbone } from '../../local-home.js';
import { type CliContext, defaultCreds, type GlobalOptions } from '../context.js';

/** The outcome of one check. */
export interface DoctorCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail';
  detail: string;
  /** What to do about a warning or a failure. */
  fix?: string;
}

/** Clock skew that breaks token expiries and presence: warn from 2 s, fail from 30 s. */
const SKEW_WARN_MS = 2_000;
const SKEW_FAIL_MS = 30_000;

/** Runs every check; never throws. */
export async function runDoctor(
  g: GlobalOptions,
  env: Record<string, string | undefined>,
): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [];
  // The same home the other commands use: PARLEY_HOME, else the nearest .parley (see local-home.ts).
  const home = localBackbone(env).home;
  const credsPath = g.as ?? defaultCreds(env);

  // The home: which one, and which server it runs.
  const homePort = readHomePort(home);
  const serverPort = portOf(g.server);
  if (!existsSync(home)) {
    checks.push({
      name: 'home',
      status: g.as ? 'ok' : 'fail',
      detail: `${home} does not exist${g.as ? ' (not needed with --as)' : ''}`,
      ...(g.as
        ? {}
        : { fix: 'run npm start in the project (it creates .parley/), or set PARLEY_HOME to your home' }),
    });
  } else if (homePort !== undefined && serverPort !== undefined && homePort !== serverPort) {
    checks.push({
      name: 'home',
      status: 'warn',
      detail: `${home}: its nats-server listens on port ${homePort}, but --server is ${g.server}`,
      fix: `pass --server nats://127.0.0.1:${homePort} (or set NATS_URL) to talk to this home's Parley`,
    });
  } else {
    checks.push({
      name: 'home',
      status: 'ok',
      detail: `${home}${homePort !== undefined ? ` (nats-server port ${homePort})` : ''}`,
    });
  }

  // The creds: readable, and whose.
  let identity: Awaited<ReturnType<typeof readCreds>> | undefined;
  let issuedAtMs: number | undefined;
  try {
    identity = await readCreds(credsPath);
    const jwt = new TextDecoder()
      .decode(identity.raw)
      .match(/-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------/)?.[1];
    const claims = jwt ? decode(jwt) : undefined;
    issuedAtMs = claims?.iat ? claims.iat * 1000 : undefined;
    const exp = (claims as { exp?: number } | undefined)?.exp;
    if (exp && exp * 1000 < Date.now()) {
      checks.push({
        name: 'creds',
        status: 'fail',
        detail: `${credsPath} (${identity.id}) expired at ${new Date(exp * 1000).toISOString()}`,
        fix: 'mint new creds: parley agent creds <agent> --out <file> (as the agent’s owner or an admin)',
      });
    } else {
      checks.push({ name: 'creds', status: 'ok', detail: `${credsPath}: ${identity.id}` });
    }
  } catch (err) {
    checks.push({
      name: 'creds',
      status: 'fail',
      detail: `${credsPath}: ${(err as Error).message}`,
      fix: g.as
        ? 'pass --as <file.creds> with a creds file Parley wrote (parley agent create --out …)'
        : 'start Parley with npm start (it writes .parley/creds/admin.creds), or pass --as <file.creds>',
    });
    return checks;
  }

  // The server: reachable with these creds.
  let nc: NatsConnection | undefined;
  try {
    ({ nc } = await connectWithCreds({ servers: g.server, creds: identity.raw, name: 'parley-doctor' }));
  } catch (err) {
    const message = (err as Error).message;
    // connectWithCreds says UNAUTHENTICATED when the server refused the creds.
    const auth = isParleyError(err, 'UNAUTHENTICATED');
    checks.push({
      name: 'server',
      status: 'fail',
      detail: `${g.server}: ${message}`,
      fix: auth
        ? 'the server refused these creds: they belong to another home or were revoked; use creds of this Parley'
        : homePort !== undefined && homePort !== serverPort
          ? `start Parley (npm start), or pass --server nats://127.0.0.1:${homePort}`
          : 'start Parley with npm start, or pass --server <url> of a running one',
    });
    return checks;
  }
  try {
    const version = nc.info?.version ?? 'unknown';
    const supported = compareServerVersions(version, MIN_SERVER_VERSION) >= 0;
    checks.push({
      name: 'server',
      status: supported ? 'ok' : 'fail',
      detail: `${g.server} reachable: nats-server ${version}${nc.info?.jetstream ? ', JetStream on' : ''}`,
      ...(supported
        ? {}
        : { fix: `upgrade nats-server to ${MIN_SERVER_VERSION} or later (2.12.3+ in production)` }),
    });
    if (!nc.info?.jetstream) {
      checks.push({
        name: 'jetstream',
        status: 'fail',
        detail: 'the server runs without JetStream',
        fix: 'start nats-server with JetStream enabled (npm start does)',
      });
    }
    for (const d of serverDefects(version)) {
      checks.push({
        name: `defect ${d.id}`,
        status: d.status === 'mitigated' ? 'ok' : 'warn',
        detail:
          `${d.summary}; fixed in ${d.fixedIn}. ${d.status === 'mitigated' ? `Parley: ${d.action}` : ''}`.trim(),
        ...(d.status === 'upgrade' ? { fix: d.action } : {}),
      });
    }

    // Whose creds these are, as the registry knows them.
    try {
      const me = await request(nc, identity.id, registryApi.whoami, {}, { timeout: 3_000 });
      checks.push({
        name: 'identity',
        status: 'ok',
        detail: [me.id, me.kind, me.name, me.org ? `org ${me.org}` : undefined, me.role]
          .filter(Boolean)
          .join('  '),
      });
    } catch (err) {
      checks.push({
        name: 'identity',
        status: 'fail',
        detail: isParleyError(err) ? `${err.code}: ${err.message}` : (err as Error).message,
        fix: 'the services are not answering, or the participant is unknown: is Parley fully started (curl /healthz)?',
      });
    }

    // The inbox, and the server's clock (consumer info carries the server time on 2.10+).
    let serverNow: number | undefined;
    if (identity.id.startsWith('agt_') || identity.id.startsWith('usr_')) {
      try {
        const jsm = await jetstreamManager(nc, { checkAPI: false });
        const info = await jsm.consumers.info(inboxStream(identity.id), identity.id);
        const ts = (info as { ts?: string }).ts;
        if (ts) serverNow = Date.parse(ts);
        const push = Boolean(info.config.deliver_subject);
        checks.push({
          name: 'inbox',
          status: info.push_bound ? 'warn' : 'ok',
          detail: `${push ? 'push' : 'pull (made by an earlier version; becomes push on the next listen)'} consumer, ${info.num_pending} waiting, ${info.num_ack_pending} unacknowledged${info.push_bound ? ', another connection receives it now' : ''}`,
          ...(info.push_bound
            ? {
                fix: 'one process per participant receives its deliveries: a second one is refused with CONFLICT',
              }
            : {}),
        });
      } catch (err) {
        checks.push({
          name: 'inbox',
          status: 'fail',
          detail: (err as Error).message,
          fix: 'the participant has no inbox consumer: it is not registered (or was deregistered) in this Parley',
        });
      }
    }
    if (serverNow !== undefined) {
      const skew = Date.now() - serverNow;
      const abs = Math.abs(skew);
      checks.push({
        name: 'clock',
        status: abs >= SKEW_FAIL_MS ? 'fail' : abs >= SKEW_WARN_MS ? 'warn' : 'ok',
        detail: `this machine is ${abs} ms ${skew >= 0 ? 'ahead of' : 'behind'} the server`,
        ...(abs >= SKEW_WARN_MS
          ? { fix: 'synchronise the clock (timedatectl set-ntp true, or chrony)' }
          : {}),
      });
    } else if (issuedAtMs !== undefined && issuedAtMs - Date.now() > SKEW_WARN_MS) {
      checks.push({
        name: 'clock',
        status: issuedAtMs - Date.now() >= SKEW_FAIL_MS ? 'fail' : 'warn',
        detail: `the creds were issued ${Math.round((issuedAtMs - Date.now()) / 1000)} s in this machine's future: its clock is behind`,
        fix: 'synchronise the clock (timedatectl set-ntp true, or chrony)',
      });
    } else {
      checks.push({
        name: 'clock',
        status: 'ok',
        detail:
          'no skew seen (the creds were not issued in the future; this server does not report its time)',
      });
    }
  } finally {
    await nc.close().catch(() => undefined);
  }
  return checks;
}

function readHomePort(home: string): number | undefined {
  const conf = join(home, 'nats', 'nats-server.conf');
  if (!existsSync(conf)) return undefined;
  const m = /^port:\s*(\d+)/m.exec(readFileSync(conf, 'utf8'));
  return m ? Number(m[1]) : undefined;
}

function portOf(url: string): number | undefined {
  const m = /:(\d+)\/?$/.exec(url.split(',')[0]?.trim() ?? '');
  return m ? Number(m[1]) : url.includes('://') ? 4222 : undefined;
}

const MARK = { ok: '✓', warn: '!', fail: '✗' } as const;

/** `parley doctor`. */
export function registerDoctorCommand(program: Command, ctx: CliContext): void {
  program
    .command('doctor')
    .description('check the local setup: home, creds, server (version and known defects), clock, inbox')
    .action(async (_o, cmd: Command) => {
      const checks = await runDoctor(ctx.globals(cmd), ctx.env);
      ctx.print(cmd, checks, (cs) => {
        // One column for the names, as wide as the longest (a defect's id can be long).
        const width = Math.max(26, ...cs.map((c) => c.name.length));
        return cs
          .map(
            (c) =>
              `${MARK[c.status]} ${c.name.padEnd(width)} ${c.detail}${c.fix ? `\n  ${''.padEnd(width)} fix: ${c.fix}` : ''}`,
          )
          .join('\n');
      });
      const failed = checks.filter((c) => c.status === 'fail');
      if (failed.length > 0) {
        throw new Error(
          `parley doctor: ${failed.length} check(s) failed: ${failed.map((c) => c.name).join(', ')}`,
        );
      }
    });
}
