/**
 * `audit chain <msg_…|tc_…>`: from a tool call or a message back to the human who started it.
 *
 * - A tool call's hop comes from its audit records (the `authorize` decision and the `call` record,
 *   domain policy and tool), found by time: the `tc_` id is a ULID made just before authorize.
 * - A message's hop comes from the room log itself, through the rooms service (`findMessage`):
 *   the stored message carries its sender, the on-behalf-of chain the ingress verified, its hop
 *   count and `causedBy`, which leads to the next hop. The token it carries leads to the audit
 *   record of the issue or exchange that made it (which link narrowed what).
 *
 * Nothing is written on the send path for this: messages are found in the log by the time in
 * their id. Who may read a chain: anyone who appears in it, an admin of the origin's org, the
 * superadmin and services; anyone else gets NOT_FOUND.
 *
 * Links are verified before they are followed: `causedBy` (and a tool call's `message`) is what the
 * sender asserted, so a link is followed only when its asserter may read the message it names (the
 * rooms service answers who may: members under the room's history policy and the message's
 * audience); otherwise the hop is marked `linkUnverified` and the walk stops. And a hop in a room
 * the caller may not read is shown redacted — its id, kind and time, nothing of its content or
 * sender — unless the caller is a service or the superadmin.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiResponse,
  type AuditHop,
  type AuditRecord,
  type Decision,
  DecisionCode,
  type governanceApi,
  idTime,
  isParleyError,
  isParticipantId,
  isServiceId,
  ParleyError,
  type ParticipantId,
  type RoomMessage,
  request,
  roomsApi,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { findAudit } from './audit.js';
import type { Directory } from './directory.js';

const SELF = serviceId('governance');
type ChainResponse = ApiResponse<typeof governanceApi.auditChain>;

/** How far around an id's time its records are looked for. */
const BEFORE_MS = 5_000;
const AUTHORIZED_WITHIN_MS = 60_000;
const CALL_RECORDED_WITHIN_MS = 3_600_000;
const MAX_HOPS = 64;

function decisionOf(r: AuditRecord | undefined): Decision | undefined {
  if (!r?.decision) return undefined;
  const code = DecisionCode.safeParse(r.data?.code);
  return { ...r.decision, ...(code.success ? { code: code.data } : {}) };
}

const shift = (d: Date, ms: number) => new Date(d.getTime() + ms);

/** Builds the chain walker. */
export function createAuditChain(deps: {
  nc: NatsConnection;
  js: JetStreamClient;
  directory: Directory;
  tracer?: Tracer | undefined;
}) {
  const { js } = deps;

  async function toolHop(id: string): Promise<{ hop: AuditHop; next?: string }> {
    const t = idTime(id);
    if (!t) throw new ParleyError('INVALID_ARGUMENT', `${id} is not a tool call id`);
    const [authorized] = await findAudit(js, {
      domain: 'policy',
      from: shift(t, -BEFORE_MS),
      to: shift(t, AUTHORIZED_WITHIN_MS),
      match: (r) => r.toolCall === id && r.action === 'authorize',
    });
    const [called] = await findAudit(js, {
      domain: 'tool',
      from: shift(t, -BEFORE_MS),
      to: shift(t, CALL_RECORDED_WITHIN_MS),
      match: (r) => r.toolCall === id,
    });
    const r = called ?? authorized;
    if (!r) throw new ParleyError('NOT_FOUND', `no tool call ${id} was recorded`);
    const decision = decisionOf(authorized);
    const status =
      typeof called?.data?.status === 'string'
        ? called.data.status
        : decision?.allow === false
          ? 'denied'
          : 'authorized (its outcome was not recorded)';
    const scope = authorized?.data?.scope;
    const hop: AuditHop = {
      kind: 'tool_call',
      id,
      actor: r.actor,
      onBehalfOf: r.onBehalfOf ?? authorized?.onBehalfOf ?? [],
      ...(decision ? { decision } : {}),
      tool: String(called?.data?.tool ?? authorized?.data?.tool ?? r.target ?? ''),
      status,
      ...(typeof (authorized ?? called)?.data?.jti === 'string'
        ? { tokenId: String((authorized ?? called)?.data?.jti) }
        : {}),
      ...(Array.isArray(scope) ? { scope: scope.map(String) } : {}),
      ...(r.causedBy ? { causedBy: r.causedBy } : {}),
      ...(r.traceId ? { traceId: r.traceId } : {}),
      at: (authorized ?? r).at,
    };
    return { hop, ...(r.message ? { next: r.message } : {}) };
  }

  /** The issue/exchange record of a token: who made it, and what was dropped. */
  async function delegationRecord(jti: string): Promise<AuditRecord | undefined> {
    const t = idTime(jti);
    if (!t) return undefined;
    const [r] = await findAudit(js, {
      domain: 'delegation',
      from: shift(t, -BEFORE_MS),
      to: shift(t, BEFORE_MS),
      match: (x) => x.data?.jti === jti && (x.action === 'issue' || x.action === 'exchange'),
    });
    return r;
  }

  async function messageHop(m: RoomMessage): Promise<AuditHop> {
    const obo = m.onBehalfOf;
    let reason = 'admitted by the ingress (member of the room)';
    if (obo) {
      const made = await delegationRecord(obo.tokenId);
      const how = made
        ? `; ${obo.tokenId} was ${made.action === 'issue' ? 'issued' : 'exchanged'} by ${made.actor} (${made.decision?.reason ?? 'ok'})`
        : '';
      reason = obo.token
        ? `admitted: ${m.sender.id} hands ${obo.principal}'s delegation ${obo.tokenId} to ${obo.chain.at(-1)}${how}`
        : `admitted: ${m.sender.id} acts for ${obo.principal} under ${obo.tokenId}${how}`;
    }
    const text = m.parts.find((p) => p.type === 'text');
    return {
      kind: 'message',
      id: m.id,
      actor: m.sender.id,
      onBehalfOf: obo ? [obo.principal, ...obo.chain] : [],
      decision: { allow: true, reason, decidedBy: 'ingress' },
      room: m.room,
      ...(obo ? { tokenId: obo.tokenId, scope: obo.scope } : {}),
      ...(m.causedBy ? { causedBy: m.causedBy } : {}),
      hop: m.hop,
      ...(m.trace ? { traceId: m.trace.traceparent.split('-')[1] as string } : {}),
      at: m.sentAt,
      ...(text?.type === 'text' ? { text: text.text.slice(0, 120) } : {}),
    };
  }

  async function mayRead(caller: string, hops: AuditHop[], origin: string | undefined): Promise<boolean> {
    if (isServiceId(caller)) return true;
    if (hops.some((h) => h.actor === caller || h.onBehalfOf.includes(caller))) return true;
    const me = await deps.directory.find(caller);
    if (me?.kind !== 'human') return false;
    if (me.superadmin) return true;
    if (me.role !== 'admin' || !origin) return false;
    return (await deps.directory.find(origin))?.org === me.org;
  }

  /** Services and the superadmin read every room; anyone else only the rooms they may read. */
  async function readsEverything(caller: string): Promise<boolean> {
    if (isServiceId(caller)) return true;
    const me = await deps.directory.find(caller);
    return me?.kind === 'human' && me.superadmin === true;
  }

  /** A hop in a room the caller may not read: that it exists, nothing of what it says or who said it. */
  const redact = (h: AuditHop): AuditHop => ({
    kind: h.kind,
    id: h.id,
    onBehalfOf: [],
    redacted: true,
    at: h.at,
  });

  return {
    async chain(of: string, caller: string): Promise<ChainResponse> {
      const all = await readsEverything(caller);
      // Each hop with whether the caller may read it (its room's history, as `history` decides).
      const walked: { hop: AuditHop; readable: boolean }[] = [];
      let complete = true;
      let next: string | undefined = of;
      // Who asserted the link to `next`: it is followed only if they could read that message.
      let assertedBy: string | undefined;
      if (of.startsWith('tc_')) {
        const t = await toolHop(of);
        walked.push({ hop: t.hop, readable: true });
        next = t.next;
        assertedBy = t.hop.actor;
      }
      for (let i = 0; next && i < MAX_HOPS; i++) {
        let found: { message: RoomMessage; readers?: string[] | undefined };
        const readers = [
          ...new Set(
            [assertedBy, all ? undefined : caller].filter((p): p is string => isParticipantId(p ?? '')),
          ),
        ];
        try {
          found = await request(
            deps.nc,
            SELF,
            roomsApi.findMessage,
            { id: next, ...(readers.length > 0 ? { readers: readers as ParticipantId[] } : {}) },
            { tracer: deps.tracer, timeout: 15_000 },
          );
        } catch (err) {
          if (!isParleyError(err, 'NOT_FOUND')) throw err;
          if (walked.length === 0) throw new ParleyError('NOT_FOUND', `no message ${of} was found`);
          complete = false;
          break;
        }
        const readable = found.readers ?? [];
        if (assertedBy && isParticipantId(assertedBy) && !readable.includes(assertedBy)) {
          // A caller-asserted link to a message its asserter could not read: never followed.
          const last = walked.at(-1);
          if (last) last.hop = { ...last.hop, linkUnverified: true };
          break;
        }
        const hop = await messageHop(found.message);
        walked.push({ hop, readable: all || readable.includes(caller) });
        next = found.message.causedBy;
        assertedBy = found.message.sender.id;
      }
      const hops = walked.map((w) => w.hop);
      const last = hops.at(-1);
      const originOf = (hs: AuditHop[]) => {
        const l = hs.at(-1);
        return l?.actor?.startsWith('usr_') === true
          ? l.actor
          : hs.map((h) => h.onBehalfOf[0]).find((p): p is string => p?.startsWith('usr_') === true);
      };
      const origin = last ? originOf(hops) : undefined;
      if (!(await mayRead(caller, hops, origin))) {
        throw new ParleyError(
          'NOT_FOUND',
          `no ${of.startsWith('tc_') ? 'tool call' : 'message'} ${of} was found`,
        );
      }
      // The origin is shown only when the hop it comes from is readable to the caller.
      const visible = walked.map((w) => (w.readable ? w.hop : redact(w.hop)));
      const shownOrigin = walked.every((w) => w.readable)
        ? origin
        : originOf(visible.filter((h) => !h.redacted));
      return { hops: visible, ...(shownOrigin ? { origin: shownOrigin } : {}), complete };
    },
  };
}
