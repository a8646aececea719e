/**
 * The one way a Parley service answers a request. NATS checks a publisher's permission on the
 * subject it publishes to, never on the reply subject it names, so a participant can name any
 * subject of the account as the reply of its request; a service that answered with `msg.respond()`
 * would publish there with the service's rights (a KV entry, a room log, another participant's
 * request subject). A reply therefore goes only to the caller's own reply prefix
 * `_INBOX.<caller>.`, the caller taken from the request subject `parley.in.<caller>.…` that the NATS
 * server authenticated. Anything else is dropped and counted (`parley_replies_refused_total`).
 */
import type { Msg, MsgHdrs } from '@nats-io/transport-node';
import { IN_PREFIX, subjects } from '@parley/contracts';
import type { Logger } from 'pino';
import type { ParleyMetrics, RefusedReply } from './metrics.js';

/** Where a refused reply is logged and counted; both optional. */
export interface ReplyWatch {
  log?: Logger | undefined;
  metrics?: ParleyMetrics | undefined;
}

const IN = IN_PREFIX;
const INBOX = '_INBOX.';

/**
 * Why `reply` may not answer a request on `subject`, or undefined when it may: it must start with
 * `_INBOX.<caller>.` where `<caller>` is the second token after `parley.in.`. Requests outside
 * `parley.in.` (the `$SRV.*` discovery of the services protocol, which participants may not publish)
 * may be answered on any `_INBOX.` subject.
 */
export function refusedReply(subject: string, reply: string): RefusedReply | undefined {
  if (!subject.startsWith(IN)) return reply.startsWith(INBOX) ? undefined : 'no_caller';
  const end = subject.indexOf('.', IN.length);
  if (end <= IN.length) return 'no_caller';
  // Compared in place rather than building `_INBOX.<caller>.`: this runs for every reply.
  const callerLength = end - IN.length;
  if (reply.length <= INBOX.length + callerLength + 1 || !reply.startsWith(INBOX)) return 'foreign_reply';
  // `<caller>.` of the subject against the same stretch of the reply (the dot included).
  for (let i = 0; i <= callerLength; i++) {
    if (reply.charCodeAt(INBOX.length + i) !== subject.charCodeAt(IN.length + i)) return 'foreign_reply';
  }
  return undefined;
}

/**
 * Answers `msg` when its reply subject belongs to its caller (see {@link refusedReply}); otherwise
 * drops the reply, logs it at debug level and counts it. Returns whether the reply was sent. A
 * request without a reply subject is answered by nobody, as before.
 */
export function respondTo(
  msg: Msg,
  data: Uint8Array,
  options: { headers?: MsgHdrs; watch?: ReplyWatch | undefined } = {},
): boolean {
  if (!msg.reply) return false;
  const refused = refusedReply(msg.subject, msg.reply);
  if (refused) {
    options.watch?.metrics?.recordRefusedReply(refused);
    options.watch?.log?.debug(
      { subject: msg.subject, reply: msg.reply, reason: refused },
      'reply dropped: the request named a reply subject outside its caller’s own inbox prefix',
    );
    return false;
  }
  msg.respond(data, options.headers ? { headers: options.headers } : undefined);
  return true;
}

/** The reply prefix `_INBOX.<caller>.` a caller's requests must name (for docs and tests). */
export function replyPrefixOf(caller: string): string {
  return `${subjects.replyPrefix(caller)}.`;
}
