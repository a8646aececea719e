/**
 * Generates the protocol documents from the contracts: the JSON Schemas, the AsyncAPI 3.0 document,
 * docs/protocol.md and docs/errors.md. `generate.ts` writes them; the drift test compares them with
 * the committed files.
 */

import { readFileSync } from 'node:fs';
import { stringify } from 'yaml';
import * as z from 'zod';
import {
  type ApiMethod,
  allApiMethods,
  apis,
  backboneDefaults,
  channels,
  ERROR_CODES,
  ErrorEnvelope,
  errorCodes,
  eventCatalog,
  headerNames,
  kvDefinitions,
  limits,
  protocolSchemas,
  streamDefinitions,
} from '../src/index.js';

/** Paths relative to the repository root → file contents. */
export type GeneratedFiles = Map<string, string>;

// The contracts package's version, as the protocol documents state it.
const PKG_VERSION: string = JSON.parse(
  readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
).version;

function schemaName(schema: z.ZodType): string {
  const meta = protocolSchemas.get(schema);
  if (!meta) throw new Error(`schema is not registered with named(): ${schema.description ?? '(anonymous)'}`);
  return meta.id;
}

function jsonSchemas(target: 'draft-2020-12' | 'draft-7', uri: (id: string) => string) {
  const out = z.toJSONSchema(protocolSchemas, { target, uri, io: 'input', unrepresentable: 'any' });
  return out.schemas as Record<string, Record<string, unknown>>;
}

function sorted<T>(obj: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(obj).sort(([a], [b]) => a.localeCompare(b)));
}

function apiChannelId(m: ApiMethod): string {
  return `${m.service}.${m.method}`;
}

function asyncApiDocument(): Record<string, unknown> {
  const schemas = jsonSchemas('draft-7', (id) => `#/components/schemas/${id}`);
  for (const s of Object.values(schemas)) {
    delete s.$schema;
    delete s.$id;
  }
  const messages: Record<string, unknown> = {};
  const message = (schema: z.ZodType) => {
    const name = schemaName(schema);
    messages[name] ??= {
      name,
      contentType: 'application/json',
      payload: { $ref: `#/components/schemas/${name}` },
    };
    return { $ref: `#/components/messages/${name}` };
  };
  messages.Error = {
    name: 'Error',
    contentType: 'application/json',
    summary: `An error reply: the ${headerNames.error} header carries the code, the body an ErrorEnvelope.`,
    headers: {
      type: 'object',
      properties: { [headerNames.error]: { $ref: '#/components/schemas/ErrorCode' } },
      required: [headerNames.error],
    },
    payload: { $ref: `#/components/schemas/${schemaName(ErrorEnvelope)}` },
  };
  const errorRef = { $ref: '#/components/messages/Error' };

  const chans: Record<string, unknown> = {};
  const ops: Record<string, unknown> = {};

  for (const c of channels) {
    const params = Object.fromEntries(
      Object.entries(c.parameters).map(([k, description]) => [k, { description }]),
    );
    const msg = message(c.payload);
    chans[c.id] = {
      address: c.address,
      description: c.summary,
      parameters: params,
      messages: { [schemaName(c.payload)]: msg },
    };
    const op: Record<string, unknown> = {
      action: c.action,
      summary: c.summary,
      channel: { $ref: `#/channels/${c.id}` },
      messages: [{ $ref: `#/channels/${c.id}/messages/${schemaName(c.payload)}` }],
    };
    if (c.reply) {
      const replyId = `${c.id}Reply`;
      chans[replyId] = {
        address: null,
        description: `Reply to ${c.id} (the request's reply subject).`,
        messages: { [schemaName(c.reply)]: message(c.reply), Error: errorRef },
      };
      op.reply = {
        channel: { $ref: `#/channels/${replyId}` },
        messages: [
          { $ref: `#/channels/${replyId}/messages/${schemaName(c.reply)}` },
          { $ref: `#/channels/${replyId}/messages/Error` },
        ],
      };
    }
    ops[c.id] = op;
  }

  for (const m of allApiMethods()) {
    const id = apiChannelId(m);
    const req = schemaName(m.request);
    const res = schemaName(m.response);
    chans[id] = {
      address: `parley.in.{callerId}.api.${m.service}.${m.method}`,
      description: `${m.summary} (access: ${m.access})`,
      parameters: {
        callerId: { description: 'The caller; the server lets only its credentials publish here.' },
      },
      messages: { [req]: message(m.request) },
    };
    chans[`${id}.reply`] = {
      address: null,
      description: `Reply to ${id}.`,
      messages: { [res]: message(m.response), Error: errorRef },
    };
    ops[id] = {
      action: 'send',
      summary: m.summary,
      channel: { $ref: `#/channels/${id}` },
      messages: [{ $ref: `#/channels/${id}/messages/${req}` }],
      reply: {
        channel: { $ref: `#/channels/${id}.reply` },
        messages: [
          { $ref: `#/channels/${id}.reply/messages/${res}` },
          { $ref: `#/channels/${id}.reply/messages/Error` },
        ],
      },
    };
  }

  return {
    asyncapi: '3.0.0',
    info: {
      title: 'Parley',
      version: PKG_VERSION,
      description:
        'The Parley wire protocol on NATS: every subject a participant, a bridge or a service uses, with its payload schema. Generated from @parley/contracts; do not edit by hand.',
      license: { name: 'Apache-2.0' },
    },
    defaultContentType: 'application/json',
    servers: {
      local: {
        host: 'localhost:4222',
        protocol: 'nats',
        description: 'The local backbone started by npm start (operator-mode auth with creds files).',
      },
    },
    channels: chans,
    operations: ops,
    components: { schemas: sorted(schemas), messages: sorted(messages) },
  };
}

function mdEscape(s: string): string {
  return s.replaceAll('|', '\\|').replaceAll('\n', ' ');
}

function schemaLink(schema: z.ZodType): string {
  const name = schemaName(schema);
  return `[${name}](protocol/schemas/${name}.json)`;
}

function protocolMarkdown(): string {
  const d = backboneDefaults();
  const lines: string[] = [];
  lines.push(
    '# Parley protocol',
    '',
    '<!-- Generated from @parley/contracts by `pnpm generate`. Do not edit by hand. -->',
    '',
    'Everything on the wire is UTF-8 JSON validated by a zod schema in `@parley/contracts`; the same',
    'schemas are published as JSON Schema in [`protocol/schemas/`](protocol/schemas/) and as an',
    'AsyncAPI 3.0 document in [`protocol/asyncapi.yaml`](protocol/asyncapi.yaml), so a bridge in any',
    'language with a NATS client can speak Parley.',
    '',
    '## Conventions',
    '',
    '- **Ids** are prefixed ULIDs: `org_`, `usr_` (human), `agt_` (agent), `room_`, `msg_`, `task_`,',
    '  `creq_` (contact request), `tc_` (tool call), `tok_` (delegation token). Services act as `svc_<name>`.',
    '- **Who is calling** is the `<id>` token of `parley.in.<id>.…`: a participant’s NATS credentials allow',
    '  publishing only under its own prefix, so the server authenticates the caller.',
    `- **Replies**: a request/reply answer is the response schema; an error reply has the \`${headerNames.error}\``,
    '  header with the [error code](errors.md) and an `ErrorEnvelope` body (plus `Nats-Service-Error` and',
    '  `Nats-Service-Error-Code` for generic NATS tools). Bad input never goes unanswered.',
    `- **Limits**: a send is at most ${limits.maxMessageBytes} bytes, an API request ${limits.maxRequestBytes} bytes,`,
    `  ${limits.maxParts} parts, ${limits.maxMentions} mentions, pages of at most ${limits.maxPageSize}.`,
    '- **Trace context**: `traceparent` / `tracestate` headers on every publish and request (W3C).',
    '- **Connections** of participants must use the reply prefix `_INBOX.<id>` (`inboxPrefix` in nats.js).',
    '',
    '## The message path',
    '',
    '| channel | subject | direction | payload | reply |',
    '| --- | --- | --- | --- | --- |',
  );
  for (const c of channels) {
    lines.push(
      `| ${c.id} | \`${c.address}\` | ${c.action === 'send' ? 'client → Parley' : 'Parley → client'} | ${schemaLink(c.payload)} | ${c.reply ? schemaLink(c.reply) : '–'} |`,
    );
  }
  lines.push('');
  for (const c of channels) lines.push(`- **${c.id}**: ${mdEscape(c.summary)}`);
  lines.push(
    '',
    `A delivery carries the headers \`${headerNames.roomSeq}\` (position in the room log) and`,
    `\`${headerNames.prevSeq}\` (the previous message of that room this recipient was sent), so a`,
    'recipient can tell a gap and backfill from `rooms.history`.',
    '',
    '## APIs',
    '',
    'Every method is request/reply on `parley.in.<callerId>.api.<service>.<method>`.',
  );
  for (const [service, methods] of Object.entries(apis)) {
    lines.push(
      '',
      `### ${service}`,
      '',
      '| method | access | request | response | what it does |',
      '| --- | --- | --- | --- | --- |',
    );
    for (const m of Object.values(methods) as ApiMethod[]) {
      lines.push(
        `| \`${m.method}\` | ${m.access} | ${schemaLink(m.request)} | ${schemaLink(m.response)} | ${mdEscape(m.summary)} |`,
      );
    }
  }
  lines.push('', '## Events', '', '| subject | meaning |', '| --- | --- |');
  for (const e of eventCatalog) lines.push(`| \`${e.subject}\` | ${mdEscape(e.summary)} |`);
  lines.push(
    '',
    '## Streams and buckets',
    '',
    `Defaults shown; replicas, ages and caps are configuration. ${d.partitions} fan-out partitions.`,
    '',
    '| stream | subjects | retention | max age | per-subject cap | notes |',
    '| --- | --- | --- | --- | --- | --- |',
  );
  const age = (ms: number) =>
    ms === 0 ? 'unlimited' : ms % 86_400_000 === 0 ? `${ms / 86_400_000} d` : `${ms / 1000} s`;
  for (const s of streamDefinitions()) {
    const notes = [
      s.denyDelete ? 'deny delete' : '',
      s.denyPurge ? 'deny purge' : '',
      mdEscape(s.description),
    ]
      .filter(Boolean)
      .join('; ');
    lines.push(
      `| \`${s.name}\` | ${s.subjects.map((x) => `\`${x}\``).join(', ')} | ${s.retention} | ${age(s.maxAgeMs)} | ${s.maxMsgsPerSubject ?? '–'} | ${notes} |`,
    );
  }
  lines.push('', '| KV bucket | TTL | history | what |', '| --- | --- | --- | --- |');
  for (const b of kvDefinitions()) {
    lines.push(
      `| \`${b.bucket}\` | ${b.ttlMs ? `${b.ttlMs / 1000} s` : '–'} | ${b.history} | ${mdEscape(b.description)} |`,
    );
  }
  lines.push('', '## Schemas', '');
  const names = [...Object.keys(jsonSchemas('draft-2020-12', (id) => `${id}.json`))].sort();
  lines.push(names.map((n) => `[${n}](protocol/schemas/${n}.json)`).join(' · '), '');
  return lines.join('\n');
}

function errorsMarkdown(): string {
  const lines = [
    '# Error codes',
    '',
    '<!-- Generated from contracts/src/errors.ts by `pnpm generate`. Do not edit by hand. -->',
    '',
    'Every refusal carries one of these codes: in the `Parley-Error` header and the `ErrorEnvelope` body',
    'on NATS, as the JSON body at the HTTP gateway, and as `err.code` of a `ParleyError` in the SDK',
    '(test it with `isParleyError(err, "NO_CONSENT")`). The CLI prints `CODE: message` and exits non-zero.',
    '',
    '| code | HTTP | meaning |',
    '| --- | --- | --- |',
  ];
  for (const code of ERROR_CODES) {
    lines.push(`| \`${code}\` | ${errorCodes[code].status} | ${mdEscape(errorCodes[code].message)} |`);
  }
  lines.push('');
  return lines.join('\n');
}

/** All generated files. */
export function generateProtocolDocs(): GeneratedFiles {
  const files: GeneratedFiles = new Map();
  const schemas = jsonSchemas('draft-2020-12', (id) => `${id}.json`);
  for (const [name, schema] of Object.entries(sorted(schemas))) {
    files.set(`docs/protocol/schemas/${name}.json`, `${JSON.stringify(schema, null, 2)}\n`);
  }
  files.set(
    'docs/protocol/asyncapi.yaml',
    `# Generated from @parley/contracts by \`pnpm generate\`. Do not edit by hand.\n${stringify(asyncApiDocument(), { lineWidth: 0, aliasDuplicateObjects: false })}`,
  );
  files.set('docs/protocol.md', protocolMarkdown());
  files.set('docs/errors.md', errorsMarkdown());
  return files;
}
