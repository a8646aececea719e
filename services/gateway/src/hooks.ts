/**
 * Inbound webhooks: `POST /v1/hooks/<hookId>` for systems that can only POST. A hook belongs to a
 * bridge agent and posts to one room; the body becomes a message (a text template filled from the
 * JSON, and/or the JSON as a data part), labelled external.
 *
 * - Signatures: Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`, HMAC-SHA256
 *   over `id.timestamp.body`, verified by the `standardwebhooks` library with its 5-minute
 *   tolerance either way) or GitHub-style `X-Hub-Signature-256` (HMAC-SHA256 of the body with the
 *   secret's text). Anything else, a bad signature or a stale timestamp: 401, nothing written.
 * - Bodies: JSON, text, or CloudEvents 1.0 over HTTP in binary or structured mode (the `cloudevents`
 *   library; batches are refused). The signature covers the raw bytes, before any parsing.
 * - Idempotency: the event id (`webhook-id`, `X-GitHub-Delivery`, or the CloudEvent's source + id)
 *   is the message's client id, and the accepted event is recorded in `parley_gateway`: the same
 *   event twice is stored once, also after the ingress's 2-minute dedupe window.
 * - The message is sent as the hook's agent over its own connection: a hook reaches no room its
 *   agent cannot, and the same refusals apply (membership, suspension, closed rooms).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { gatewayKeys, type HookRecord, ParleyError, type Part } from '@parley/contracts';
import { type CloudEvent, HTTP } from 'cloudevents';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { sha256 } from './secrets.js';
import type { GatewayService } from './service.js';

/** How a verified request identified its event. */
interface Verified {
  eventId: string;
  scheme: 'standard-webhooks' | 'github';
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Verifies the request's signature against the hook's secret; 401 for anything wrong. */
export function verifySignature(hook: HookRecord, req: FastifyRequest, raw: Buffer): Verified {
  if (header(req, 'webhook-signature') !== undefined) {
    try {
      new Webhook(hook.secret).verify(
        raw.toString('utf8'),
        req.headers as Record<string, string>,
        {
          jsonParse: false,
        } as never,
      );
    } catch (err) {
      const stale = err instanceof WebhookVerificationError && /timestamp/i.test(err.message);
      throw new ParleyError(
        'UNAUTHENTICATED',
        stale
          ? 'the webhook timestamp is outside the 5-minute window'
          : 'the webhook signature does not verify',
      );
    }
    return { eventId: header(req, 'webhook-id') as string, scheme: 'standard-webhooks' };
  }
  const hub = header(req, 'x-hub-signature-256');
  if (hub !== undefined) {
    const expected = Buffer.from(`sha256=${createHmac('sha256', hook.secret).update(raw).digest('hex')}`);
    const given = Buffer.from(hub);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new ParleyError('UNAUTHENTICATED', 'the X-Hub-Signature-256 does not verify');
    }
    return {
      eventId: header(req, 'x-github-delivery') ?? `body:${sha256(raw.toString('latin1'))}`,
      scheme: 'github',
    };
  }
  throw new ParleyError(
    'UNAUTHENTICATED',
    'missing signature: sign with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) or X-Hub-Signature-256',
  );
}

/** What the body says: JSON (or text), and CloudEvent attributes when it is one. */
interface Payload {
  json?: unknown;
  text?: string;
  cloudEvent?: { id: string; source: string; type: string; subject?: string };
}

/** Parses the body: CloudEvents (binary or structured), JSON, or text. */
export function parsePayload(req: FastifyRequest, raw: Buffer): Payload {
  const type = (header(req, 'content-type') ?? '').toLowerCase();
  if (type.startsWith('application/cloudevents-batch')) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      'CloudEvents batches are not accepted: send one event per request',
    );
  }
  if (type.startsWith('application/cloudevents') || header(req, 'ce-id') !== undefined) {
    let event: CloudEvent<unknown>;
    try {
      const parsed = HTTP.toEvent({
        headers: req.headers as Record<string, string>,
        body: raw.toString('utf8'),
      });
      event = (Array.isArray(parsed) ? parsed[0] : parsed) as CloudEvent<unknown>;
      // toEvent does not validate (it builds the event non-strictly): required attributes are checked here.
      event.validate();
    } catch (err) {
      throw new ParleyError(
        'INVALID_ARGUMENT',
        `not a valid CloudEvent: ${(err as Error).message}`.slice(0, 300),
      );
    }
    const data: unknown = event.data;
    if (typeof data === 'string') {
      try {
        return { json: JSON.parse(data), cloudEvent: ceAttributes(event) };
      } catch {
        return { text: data, cloudEvent: ceAttributes(event) };
      }
    }
    return { json: data, cloudEvent: ceAttributes(event) };
  }
  const text = raw.toString('utf8');
  if (type.includes('json') || type === '') {
    try {
      return { json: text.length ? JSON.parse(text) : {} };
    } catch {
      if (type.includes('json')) throw new ParleyError('INVALID_ARGUMENT', 'the body is not valid JSON');
    }
  }
  return { text };
}

function ceAttributes(e: CloudEvent<unknown>): {
  id: string;
  source: string;
  type: string;
  subject?: string;
} {
  return {
    id: String(e.id),
    source: String(e.source),
    type: String(e.type),
    ...(typeof e.subject === 'string' ? { subject: e.subject } : {}),
  };
}

/** `{{a.b}}` → that field of `data` (missing fields become empty). */
export function renderTemplate(template: string, data: unknown): string {
  return template.replaceAll(/\{\{\s*([\w.-]+)\s*\}\}/g, (_m, path: string) => {
    let v: unknown = data;
    for (const k of path.split('.'))
      v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
    return v === undefined || v === null ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  });
}

/** The parts of the message a hook makes from a payload. */
export function partsFor(hook: HookRecord, p: Payload): Part[] {
  const parts: Part[] = [];
  if (hook.template !== undefined)
    parts.push({ type: 'text', text: renderTemplate(hook.template, p.json ?? {}) || '(empty)' });
  if (p.json !== undefined && (hook.includeData || hook.template === undefined)) {
    const data =
      p.json !== null && typeof p.json === 'object' && !Array.isArray(p.json)
        ? (p.json as Record<string, unknown>)
        : { value: p.json };
    parts.push({ type: 'data', data, mediaType: 'application/json' });
  }
  if (p.text !== undefined && hook.template === undefined)
    parts.push({ type: 'text', text: p.text.slice(0, 100_000) || '(empty)' });
  if (!parts.length) parts.push({ type: 'text', text: '(empty)' });
  return parts;
}

/** Registers `POST /v1/hooks/:hookId` (and the CloudEvents webhook handshake, `OPTIONS`). */
export async function registerHooks(app: FastifyInstance, service: GatewayService): Promise<void> {
  await app.register(async (hooks) => {
    // Signatures cover the exact bytes: every body stays a Buffer here.
    hooks.removeAllContentTypeParsers();
    hooks.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

    // CloudEvents HTTP webhook abuse protection (http-webhook.md §4): a sender asks first.
    hooks.options('/v1/hooks/:hookId', async (req, reply) => {
      const { hookId } = req.params as { hookId: string };
      if (!(await service.hook(hookId))) throw new ParleyError('NOT_FOUND', 'no such hook');
      const origin = header(req, 'webhook-request-origin');
      if (origin) void reply.header('webhook-allowed-origin', origin);
      if (header(req, 'webhook-request-rate')) void reply.header('webhook-allowed-rate', '*');
      return reply.code(200).send();
    });

    hooks.post(
      '/v1/hooks/:hookId',
      { bodyLimit: service.config.PARLEY_GATEWAY_MAX_BODY_BYTES },
      async (req, reply) => {
        const { hookId } = req.params as { hookId: string };
        const hook = /^hook_[0-9A-HJKMNP-TV-Z]{26}$/.test(hookId) ? await service.hook(hookId) : undefined;
        if (!hook) throw new ParleyError('NOT_FOUND', 'no such hook');
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const verified = verifySignature(hook, req, raw);
        const payload = parsePayload(req, raw);
        const eventId = payload.cloudEvent
          ? `ce:${payload.cloudEvent.source}:${payload.cloudEvent.id}`
          : `${verified.scheme}:${verified.eventId}`;
        const eventHash = sha256(eventId).slice(0, 40);
        const seenKey = gatewayKeys.hookEvent(hook.id, eventHash);
        const seen = await service.kv().get(seenKey);
        if (seen?.operation === 'PUT') {
          return reply.code(200).send({ ...(seen.json() as object), duplicate: true });
        }
        const held = await service.pool.acquire(hook.agent);
        try {
          const sent = await held.agent.rooms.room(hook.room).send(partsFor(hook, payload), {
            clientMsgId: `hook-${eventHash}`,
            delegation: null,
            deadlineMs: 10_000,
            provenance: {
              trust: 'external',
              source: `webhook:${hook.id}`,
              ...(payload.cloudEvent
                ? {
                    note: `CloudEvent ${payload.cloudEvent.type} from ${payload.cloudEvent.source}`.slice(
                      0,
                      500,
                    ),
                  }
                : {}),
            },
            metadata: {
              hook: hook.id,
              event: eventId.slice(0, 1024),
              ...(payload.cloudEvent ? { 'ce-type': payload.cloudEvent.type.slice(0, 1024) } : {}),
            },
          });
          const record = { id: sent.id, roomSeq: sent.roomSeq, room: hook.room };
          await service.kv().put(seenKey, JSON.stringify(record));
          return reply
            .code(sent.duplicate ? 200 : 202)
            .send({ ...record, duplicate: sent.duplicate === true });
        } finally {
          held.release();
        }
      },
    );
  });
}
