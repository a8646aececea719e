/**
 * The README's tour, driven as written: every `npx parley …` and `curl …` command of the "A 5-minute
 * tour" and "Connect" sections is parsed out of README.md and run in order (the CLI in this
 * process, as a second terminal would run it), against `npm start`'s backbone on other ports and
 * home, then the backbone is restarted and checked again. A command the README shows followed by
 * `# CODE: …` must be refused with that code; every other must succeed.
 */
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { runCli } from '@parley/sdk/cli';
import { freePort } from '@parley/standalone';
import { type BackboneProcess, startBackboneProcess } from '@parley/test/harness';

const root = resolve(import.meta.dirname, '../../..');
const README = join(root, 'README.md');

/** A command of the README, with the refusal the README shows for it, if any. */
interface TourCommand {
  line: string;
  refusal?: string;
}

/** Splits a shell command line into words (single and double quotes; no expansion). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let cur = '';
  let quote: string | undefined;
  let has = false;
  for (const ch of line) {
    if (quote) {
      if (ch === quote) quote = undefined;
      else cur += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      has = true;
    } else if (/\s/.test(ch)) {
      if (has || cur) words.push(cur);
      cur = '';
      has = false;
    } else cur += ch;
  }
  if (has || cur) words.push(cur);
  return words;
}

/** Drops a trailing `# comment` (a # after whitespace, outside quotes). */
function withoutComment(line: string): string {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i] as string;
    if (quote) {
      if (ch === quote) quote = undefined;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (ch === '#' && (i === 0 || /\s/.test(line[i - 1] as string))) return line.slice(0, i).trimEnd();
  }
  return line.trimEnd();
}

/** The tour's commands, in order: code blocks of both sections, and inline ones of the tour's steps. */
export function tourCommands(readme: string): TourCommand[] {
  const start = readme.indexOf('## A 5-minute tour');
  const connect = readme.indexOf('## Connect Claude Code');
  const end = readme.indexOf('\n## ', connect + 1);
  assert.ok(start >= 0 && connect > start && end > connect, 'the README has its tour and Connect sections');
  const found: (TourCommand & { at: number })[] = [];
  const isCommand = (s: string) => s.startsWith('npx parley ') || s.startsWith('curl ');
  // Code blocks: one command a line (a trailing \ continues it), `# CODE: …` right after one is the
  // refusal it gets. Blanked out of `prose` so inline spans are looked for only outside them.
  let prose = readme.slice(0, end);
  for (const block of readme.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)) {
    const at = start + (block.index ?? 0);
    prose = prose.slice(0, at) + ' '.repeat(block[0].length) + prose.slice(at + block[0].length);
    let pending = '';
    for (const [n, raw] of (block[1] as string).split('\n').entries()) {
      const line = raw.trim();
      const refusal = /^# ([A-Z_]+): /.exec(line)?.[1];
      if (refusal) {
        const last = found.at(-1);
        assert.ok(last && last.at >= at, `a refusal comment with no command before it: ${line}`);
        last.refusal = refusal;
        continue;
      }
      const joined = pending + line;
      if (joined.endsWith('\\')) {
        pending = `${joined.slice(0, -1).trimEnd()} `;
        continue;
      }
      pending = '';
      const cmd = withoutComment(joined);
      if (isCommand(cmd)) found.push({ line: cmd, at: at + n });
    }
  }
  // Inline commands only in the tour's steps; the Connect prose names `parley mcp`, which is a
  // server for an MCP client, not a command to run from a terminal. A span may wrap lines.
  for (const m of prose.slice(start, connect).matchAll(/`([^`]+)`/g)) {
    const span = (m[1] as string).replace(/\s+/g, ' ').trim();
    // `<agt_…>`, `<file.creds>`: a syntax the prose describes, not a command (ours are `agt_<name>`).
    if (isCommand(span) && !/(^|[^_])</.test(span)) found.push({ line: span, at: start + (m.index ?? 0) });
  }
  return found.sort((a, b) => a.at - b.at).map(({ at: _, ...c }) => c);
}

/** What the commands printed so far: the latest id of each kind, and ids by name. */
class Ids {
  readonly latest = new Map<string, string>();
  readonly named = new Map<string, string>();
  learn(text: string): void {
    for (const m of text.matchAll(/\b(room|msg|creq|org|usr|agt|mtk|tok)_[0-9A-Z]{26}\b/g))
      this.latest.set(m[1] as string, m[0]);
    // "agt_…  reviewer  owner …", "usr_…  grace  member in …", "org_…  acme"
    for (const m of text.matchAll(/^((?:agt|usr|org)_[0-9A-Z]{26})\s+([\w.-]+)/gm))
      this.named.set(`${(m[1] as string).slice(0, 3)}:${m[2]}`, m[1] as string);
    // The demo: "planner (agt_…)", "reviewer (agt_…)".
    for (const m of text.matchAll(/\b([a-z][\w-]*) \((agt_[0-9A-Z]{26})/g))
      this.named.set(`agt:${m[1]}`, m[2] as string);
    try {
      const v = JSON.parse(text) as { id?: unknown; name?: unknown };
      if (typeof v.id === 'string' && typeof v.name === 'string')
        this.named.set(`${v.id.slice(0, 3)}:${v.name}`, v.id);
    } catch {
      // not JSON
    }
  }
  /** Replaces `room_…` by the latest room id, `agt_<reviewer>` by the agent named reviewer, … */
  resolve(word: string): string {
    return word
      .replace(/\b(room|msg|creq|org|usr|agt|mtk|tok)_…/g, (_, kind: string) => {
        const id = this.latest.get(kind);
        assert.ok(id, `no ${kind}_ id printed before “${word}”`);
        return id;
      })
      .replace(/\b(org|usr|agt)_<([\w-]+)>/g, (_, kind: string, name: string) => {
        const id = this.named.get(`${kind}:${name}`);
        assert.ok(id, `no ${kind} named ${name} printed before “${word}”`);
        return id;
      });
  }
}

const dirs: string[] = [];
const running: BackboneProcess[] = [];
after(async () => {
  for (const b of running) await b.stop();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('the README tour', () => {
  it('works as written, from npm start to the Connect section, and again after a restart', async () => {
    const commands = tourCommands(await readFile(README, 'utf8'));
    // The parser found the tour (not an empty list that passes by running nothing).
    assert.ok(commands.length >= 40, `only ${commands.length} commands parsed`);
    assert.ok(commands.some((c) => c.refusal === 'NO_CONSENT'));

    const home = await mkdtemp(join(tmpdir(), 'parley-tour-home-'));
    // The second terminal's working directory: creds files the tour writes land here.
    const work = await mkdtemp(join(tmpdir(), 'parley-tour-'));
    dirs.push(home, work);
    await copyFile(README, join(work, 'README.md'));
    process.chdir(work);
    const natsPort = await freePort();
    const httpPort = await freePort();
    const args = [
      '--home',
      home,
      '--nats-port',
      String(natsPort),
      '--http-port',
      String(httpPort),
      '--nats-ws-port',
      String(await freePort()),
    ];
    const ids = new Ids();
    // The second terminal's environment: only what the banner told it to export.
    const env: Record<string, string | undefined> = {
      ...process.env,
      PARLEY_HOME: undefined,
      NATS_URL: undefined,
      HOME: work,
      CODEX_HOME: join(work, 'codex'),
    };
    const start = async () => {
      const b = startBackboneProcess(args);
      running.push(b);
      // The whole banner: its suggestions are read below (it may reach us in more than one chunk).
      await b.waitForOutput('Ctrl-C stops everything');
      const out = b.output();
      // The demo's task story fails a task on purpose ("task … failed"): what must not appear is a step of
      // the demo, or the backbone, failing.
      assert.doesNotMatch(
        out,
        /demo {2}did not run|step failed|stop failed|a failed start|still running after/,
      );
      assert.match(out, /demo {2}auditor → room: /);
      // Commands printed to paste: with another home, the one export the CLI needs.
      for (const m of out.matchAll(/^\s+export (\w+)=(\S+)/gm)) env[m[1] as string] = m[2] as string;
      ids.learn(out);
      return b;
    };
    const runOne = async (c: TourCommand) => {
      const words = shellWords(c.line).map((w) => ids.resolve(w.replaceAll(':7420', `:${httpPort}`)));
      if (words[0] === 'curl') {
        const url = words.find((w) => /localhost:|127\.0\.0\.1:/.test(w)) as string;
        const res = await fetch(
          url.startsWith('http') ? url : `http://${url.replace('localhost', '127.0.0.1')}`,
        );
        assert.equal(res.status, 200, c.line);
        return await res.text();
      }
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(words.slice(2), { out: (l) => out.push(l), err: (l) => err.push(l) }, env);
      const text = out.join('\n');
      if (c.refusal) {
        assert.equal(code, 1, `${c.line} should be refused with ${c.refusal}:\n${text}`);
        assert.match(err.join('\n'), new RegExp(`^${c.refusal}: `), c.line);
      } else {
        assert.equal(code, 0, `${c.line} (as ${words.join(' ')}):\n${err.join('\n')}`);
      }
      ids.learn(text);
      return text;
    };

    const first = await start();
    assert.ok(env.PARLEY_HOME, 'the banner says how to find a home that is not ./.parley');
    const seen = new Map<string, string>();
    for (const c of commands) seen.set(c.line, (await runOne(c)) ?? '');
    // A few things the README says each step shows.
    assert.match(seen.get('npx parley tail --count 6') ?? '', /: Plan: /);
    assert.match(
      seen.get('npx parley trace msg_… --room room_…') ?? '',
      /^trace [0-9a-f]{32} {2}\(#\d+ in room_/,
    );

    first.signal('SIGINT');
    assert.equal(await first.exited, 0, first.output());
    const second = await start();
    // The banner's own suggestions work as printed (after the restart: the first start's demo
    // conversation was the tour's `tail`, this one's is theirs).
    const tryLines = (second.output().split('Try, in another terminal:\n')[1] ?? '').split('\n\n')[0] ?? '';
    const suggested = tryLines
      .split('\n')
      .map((l) => withoutComment(l.trim()))
      .filter((l) => l.startsWith('npx parley ') || l.startsWith('curl '));
    assert.ok(suggested.length >= 5, tryLines);
    for (const line of suggested) await runOne({ line });
    // After the restart: the CLI, and each connected session's creds, work as before.
    assert.match((await runOne({ line: 'npx parley whoami' })) ?? '', /^usr_\w+ {2}human {2}admin/);
    const mcp = JSON.parse(await readFile(join(work, '.mcp.json'), 'utf8')) as {
      mcpServers: { parley: { args: string[] } };
    };
    const creds = mcp.mcpServers.parley.args[mcp.mcpServers.parley.args.indexOf('--creds') + 1] as string;
    await runOne({ line: `npx parley whoami --as ${creds}` });
    second.signal('SIGINT');
    assert.equal(await second.exited, 0, second.output());
  });
});
