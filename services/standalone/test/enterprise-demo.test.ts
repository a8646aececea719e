/**
 * `npm start -- --demo enterprise`, as the README's tour gives it: the backbone starts, the
 * Salesforce, SAP and Databricks bridges work the case to an approved credit hold in one trace,
 * the commands the banner suggests show the case and its audit chain, and Ctrl-C stops it all.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { runCli } from '@parley/sdk/cli';
import { freePort } from '@parley/standalone';
import { type BackboneProcess, startBackboneProcess } from '@parley/test/harness';

const root = resolve(import.meta.dirname, '../../..');
const dirs: string[] = [];
const running: BackboneProcess[] = [];
after(async () => {
  for (const b of running) await b.stop();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('npm start -- --demo enterprise', () => {
  it('runs the cross-system case to an approved credit hold in one trace; the suggested commands show it', async () => {
    const readme = await readFile(join(root, 'README.md'), 'utf8');
    const tour = readme.slice(readme.indexOf('## A 5-minute tour'), readme.indexOf('## Connect Claude Code'));
    const command = /`npm start -- (--demo enterprise)`/.exec(tour);
    assert.ok(command, 'the README tour gives the command');
    const home = await mkdtemp(join(tmpdir(), 'parley-enterprise-home-'));
    dirs.push(home);
    const b = startBackboneProcess([
      ...(command[1] as string).split(' '),
      '--home',
      home,
      '--nats-port',
      String(await freePort()),
      '--http-port',
      String(await freePort()),
      '--nats-ws-port',
      String(await freePort()),
    ]);
    running.push(b);
    // The banner ends after the case finished (or after it gave up, which the asserts below catch).
    await b.waitForOutput('Ctrl-C stops everything', 120_000);
    const out = b.output();
    assert.doesNotMatch(out, /did not run|did not finish|demo {2}planner/);
    for (const who of ['salesforce', 'databricks', 'sap'])
      assert.match(out, new RegExp(`^case {2}${who} `, 'm'), `${who} took part:\n${out}`);
    assert.match(out, /^case {2}maria {6}Approved/m);
    assert.match(out, /Credit_Hold__e \{.*"Reason__c":"risk 0\.91, approved by maria"\}/);
    const traced = /case room (room_\w+): (\d+) of (\d+) messages in trace [0-9a-f]{32}/.exec(out);
    assert.ok(traced, out);
    assert.equal(traced[2], traced[3], 'every message of the case in the trace');
    assert.ok(Number(traced[3]) >= 9, `the whole case (${traced[3]} messages)`);
    const maria = /maria \((usr_\w+)\)/.exec(out)?.[1];
    assert.ok(maria);

    // The banner's commands for the case, run as a second terminal would (the local admin).
    const suggested = (out.split('Try, in another terminal:\n')[1] ?? '')
      .split('\n')
      .map((l) => l.trim().replace(/\s+#.*$/, ''))
      .filter((l) => /^npx parley (history|audit) /.test(l));
    assert.equal(suggested.length, 2, out);
    const env = { ...process.env, PARLEY_HOME: home, NATS_URL: undefined };
    const said: string[] = [];
    for (const line of suggested) {
      const lines: string[] = [];
      const err: string[] = [];
      const code = await runCli(
        line.split(' ').slice(2),
        { out: (l) => lines.push(l), err: (l) => err.push(l) },
        env,
      );
      assert.equal(code, 0, `${line}:\n${err.join('\n')}`);
      said.push(lines.join('\n'));
    }
    assert.match(said[0] ?? '', /Approved: put the account on credit hold/);
    assert.match(said[0] ?? '', /Credit_Hold__e published/);
    assert.match(said[1] ?? '', new RegExp(maria), 'the audit chain leads back to maria');

    b.signal('SIGINT');
    assert.equal(await b.exited, 0, b.output());
  });
});
