/**
 * The Go client (clients/go), built with Debian's golang-go and nats.go in GOPATH mode, against a
 * real backbone: connects with creds, sends through the ingress, consumes its inbox in order and
 * acknowledges, answers in the same trace, resumes where it stopped, and reports refusals by code.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { inboxStream, otelApi, registryApi } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import type { Agent } from '@parley/sdk';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const GOCODE = '/usr/share/gocode';
const goMissing =
  spawnSync('go', ['version']).status !== 0
    ? 'go is not installed (the bootstrap installs golang-go with apt-get on Debian as root)'
    : !existsSync(join(GOCODE, 'src/github.com/nats-io/nats.go'))
      ? 'nats.go is not installed (Debian package golang-github-nats-io-go-nats-dev)'
      : undefined;

type Line = Record<string, unknown> & { event: string };

function runGo(bin: string, args: string[]): { proc: ChildProcess; lines: Line[]; exit: Promise<number> } {
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Line[] = [];
  let buf = '';
  proc.stdout?.on('data', (c: Buffer) => {
    buf += c.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      lines.push(JSON.parse(buf.slice(0, i)) as Line);
      buf = buf.slice(i + 1);
    }
  });
  let stderr = '';
  proc.stderr?.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exit = new Promise<number>((resolve) =>
    proc.on('exit', (code) => {
      if (code !== 0 && stderr) process.stderr.write(`parley-go stderr: ${stderr}\n`);
      resolve(code ?? -1);
    }),
  );
  return { proc, lines, exit };
}

const traceIdOf = (tp: unknown) => String(tp ?? '').split('-')[1];
const randomHex = (n: number) =>
  Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');

describe('Go client', { skip: goMissing }, () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let gopath: string;
  let bin: string;
  let goCreds: string;
  let goId: string;
  let ts: Agent;
  let room: string;

  before(async () => {
    gopath = await mkdtemp(join(tmpdir(), 'parley-gopath-'));
    await mkdir(join(gopath, 'src', 'parley.dev'), { recursive: true });
    await symlink(join(root, 'clients', 'go'), join(gopath, 'src', 'parley.dev', 'go'));
    bin = join(gopath, 'parley-go');
    const build = spawnSync('go', ['build', '-o', bin, 'parley.dev/go/cmd/parley-go'], {
      env: {
        ...process.env,
        GO111MODULE: 'off',
        GOPATH: `${gopath}:${GOCODE}`,
        // Go's own content-addressed build cache, kept between runs: the cluster pass of npm test
        // then links what the first pass compiled (nats.go from scratch took ~5 s of each build).
        GOCACHE: join(root, 'node_modules', '.cache', 'go-build'),
        GOFLAGS: '',
        GOPROXY: 'off',
      },
      encoding: 'utf8',
    });
    assert.equal(build.status, 0, `go build failed:\n${build.stderr}`);
    parley = await startParley({ telemetry: loadTelemetryConfig({}) });
    svc = await connectService(parley);
    const g = await parley.participant();
    goId = g.id;
    goCreds = join(gopath, 'go-agent.creds');
    await writeFile(goCreds, g.creds, { mode: 0o600 });
    ts = await parley.connect((await parley.participant()).creds, { presence: false });
    room = (await ts.rooms.create('go and ts', { members: [goId] })).id;
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
    if (gopath) await rm(gopath, { recursive: true, force: true });
  });

  /** Sends `text` from the TS agent inside a trace of its own; returns the trace id. */
  async function sendTraced(text: string): Promise<string> {
    const api = otelApi;
    assert.ok(api, '@opentelemetry/api is installed');
    const traceId = randomHex(32);
    const ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, {
      traceId,
      spanId: randomHex(16),
      traceFlags: 1,
      isRemote: true,
    });
    await api.context.with(ctx, () => ts.rooms.room(room).send(text));
    return traceId;
  }

  it('sends with its traceparent, consumes the inbox in order, acks, and answers each message in the same trace', async () => {
    const traceparent = `00-${randomHex(32)}-${randomHex(16)}-01`;
    const go = runGo(bin, [
      '-servers',
      parley.natsUrl,
      '-creds',
      goCreds,
      '-room',
      room,
      '-send',
      'hello from Go',
      '-traceparent',
      traceparent,
      '-echo',
      '20',
    ]);
    await waitFor(
      () => go.lines.some((l) => l.event === 'sent'),
      () => `the Go send (${JSON.stringify(go.lines)})`,
      30_000,
    );
    const presence = async () =>
      (await ts.call(registryApi.presence, { participants: [goId] })).presence[goId];
    await waitFor(async () => (await presence())?.state === 'online', 'the Go client online');
    assert.equal((await presence())?.activity, 'parley-go');
    const traces: string[] = [];
    for (let i = 0; i < 20; i++) traces.push(await sendTraced(`message ${i}`));
    assert.equal(await go.exit, 0, JSON.stringify(go.lines));
    await waitFor(
      async () => (await presence())?.state === 'offline',
      'the Go client offline after it exited',
    );
    const received = go.lines.filter((l) => l.event === 'received');
    assert.deepEqual(
      received.map((l) => l.text),
      traces.map((_, i) => `message ${i}`),
    );
    const seqs = received.map((l) => Number(l.roomSeq));
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      'in room order',
    );
    assert.deepEqual(
      received.map((l) => traceIdOf(l.traceparent)),
      traces,
      'each delivery carried its trace',
    );

    const history = (await ts.rooms.room(room).history({ order: 'oldest', limit: 200 })).entries;
    const fromGo = history.filter((e) => e.message.sender.id === goId && e.message.kind === 'message');
    assert.equal(
      fromGo[0]?.message.parts[0]?.type === 'text' && fromGo[0].message.parts[0].text,
      'hello from Go',
    );
    assert.equal(traceIdOf(fromGo[0]?.message.trace?.traceparent), traceIdOf(traceparent));
    const echoes = fromGo.slice(1);
    assert.equal(echoes.length, 20);
    for (const [i, e] of echoes.entries()) {
      const original = history.find((h) => h.message.id === e.message.replyTo);
      assert.equal(
        original?.message.parts[0]?.type === 'text' && original.message.parts[0].text,
        `message ${i}`,
      );
      assert.equal(e.message.causedBy, original?.message.id);
      assert.equal(e.message.hop, 1);
      assert.equal(traceIdOf(e.message.trace?.traceparent), traces[i], 'the answer is in the asker’s trace');
    }
    const info = await (await jetstreamManager(svc)).consumers.info(inboxStream(goId), goId);
    const lastHandled = Math.max(...received.map((l) => Number(l.streamSeq)));
    assert.ok(
      info.ack_floor.stream_seq >= lastHandled,
      `acknowledged up to ${info.ack_floor.stream_seq}, handled ${lastHandled}`,
    );
  });

  it('restarted, it resumes after what it acknowledged: only the messages sent while it was away', async () => {
    for (let i = 0; i < 5; i++) await sendTraced(`while away ${i}`);
    const go = runGo(bin, ['-servers', parley.natsUrl, '-creds', goCreds, '-echo', '5']);
    assert.equal(await go.exit, 0, JSON.stringify(go.lines));
    assert.deepEqual(
      go.lines.filter((l) => l.event === 'received').map((l) => l.text),
      [0, 1, 2, 3, 4].map((i) => `while away ${i}`),
    );
  });

  it('a refused send reports the error code', async () => {
    const other = (await ts.rooms.create('without Go')).id;
    const go = runGo(bin, [
      '-servers',
      parley.natsUrl,
      '-creds',
      goCreds,
      '-room',
      other,
      '-send',
      'let me in',
    ]);
    assert.equal(await go.exit, 1);
    const err = go.lines.find((l) => l.event === 'error');
    assert.equal(err?.code, 'NOT_A_MEMBER');
  });
});
