import * as z from 'zod';
import { MessageId, ParticipantId, PrincipalId, RoomId, TaskId } from './ids.js';
import { jsonDepth, limits } from './limits.js';
import { named } from './registry-of-schemas.js';

/** A text part: what a person or a model reads. */
export const TextPart = named(
  'TextPart',
  z
    .object({
      type: z.literal('text'),
      text: z.string().min(1).max(limits.maxTextChars),
    })
    .describe('Plain text (Markdown allowed).'),
);

/** A structured JSON part. */
export const DataPart = named(
  'DataPart',
  z
    .object({
      type: z.literal('data'),
      data: z
        .record(z.string(), z.unknown())
        .refine((d) => jsonDepth(d, limits.maxDataDepth) <= limits.maxDataDepth, {
          message: `data nests deeper than ${limits.maxDataDepth} levels`,
        })
        .describe(`Any JSON object, nested at most ${limits.maxDataDepth} levels deep.`),
      mediaType: z.string().max(127).optional().describe('e.g. application/json'),
    })
    .describe('Structured data, like an A2A DataPart.'),
);

/** A reference to an artifact in the object store (or at a URL). */
export const FilePart = named(
  'FilePart',
  z
    .object({
      type: z.literal('file'),
      name: z.string().min(1).max(255).describe('File name shown to people.'),
      mediaType: z.string().max(127).optional(),
      size: z.int().min(0).optional().describe('Bytes.'),
      artifact: z.string().max(255).optional().describe('Key in the parley_artifacts object store.'),
      url: z.url().max(2048).optional().describe('Where the file can be fetched instead.'),
      digest: z.string().max(128).optional().describe('e.g. sha256=…'),
    })
    .refine((p) => p.artifact !== undefined || p.url !== undefined, {
      message: 'a file part needs an artifact key or a url',
    })
    .describe('A file, by reference: parts never carry file bytes inline.'),
);

/** One part of a message. */
export const Part = named(
  'Part',
  z.discriminatedUnion('type', [TextPart, DataPart, FilePart]).describe('text | data | file'),
);
export type Part = z.infer<typeof Part>;

/**
 * What a message is. `handoff` carries a {@link Handoff} data part; `membership` and `room` are
 * written by the rooms service only.
 */
export const MessageKind = named(
  'MessageKind',
  z
    .enum(['message', 'handoff', 'status', 'task.assigned', 'task.update', 'system', 'membership', 'room'])
    .describe('What the message is; membership/room/system are written by Parley itself.'),
);
export type MessageKind = z.infer<typeof MessageKind>;

/** Kinds a participant may send. */
export const SendableKind = z.enum(['message', 'handoff', 'status', 'task.assigned', 'task.update']);

/**
 * The shared-context document that should cross a boundary between agents: what the goal is, what
 * is done, what was tried and ruled out, what is open, and the artifacts.
 */
export const Handoff = named(
  'Handoff',
  z
    .object({
      goal: z.string().min(1).max(4000),
      done: z.array(z.string().max(4000)).max(100).default([]),
      triedAndRuledOut: z.array(z.string().max(4000)).max(100).default([]),
      openQuestions: z.array(z.string().max(4000)).max(100).default([]),
      artifacts: z.array(z.string().max(2048)).max(100).default([]),
    })
    .describe('Structured handoff: the data part of a message of kind handoff.'),
);
export type Handoff = z.infer<typeof Handoff>;

/** Media type of the data part that carries a {@link Handoff} in a `handoff` message. */
export const HANDOFF_MEDIA_TYPE = 'application/vnd.parley.handoff+json';

/** Where content came from, when it came from outside: rendered as data, never as instructions. */
export const Provenance = named(
  'Provenance',
  z
    .object({
      trust: z.enum(['internal', 'external']).describe('external = untrusted text'),
      source: z.string().max(200).describe('e.g. email, ticket, org_…'),
      note: z.string().max(500).optional(),
    })
    .describe('Labels content that came from outside the sender’s own authority.'),
);
export type Provenance = z.infer<typeof Provenance>;

/** W3C trace context of the message, copied into the body so history keeps it. */
export const TraceContext = named(
  'TraceContext',
  z
    .object({
      traceparent: z.string().regex(/^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/),
      tracestate: z.string().max(512).optional(),
    })
    .describe('W3C trace context.'),
);
export type TraceContext = z.infer<typeof TraceContext>;

/** The verified on-behalf-of chain of a message: whose authority the sender acts under. */
export const OnBehalfOf = named(
  'OnBehalfOf',
  z
    .object({
      principal: ParticipantId.describe('The human whose authority the chain starts from.'),
      chain: z.array(PrincipalId).min(1).describe('Actors from the first to the current one.'),
      scope: z.array(z.string()).describe('Scopes the current actor holds for this work.'),
      tokenId: z.string().describe('jti of the verified token.'),
      expiresAt: z.iso.datetime().optional().describe('When the token expires.'),
      token: z
        .string()
        .optional()
        .describe(
          'A hand-over: the sender passes this token to the current actor (the last of `chain`), who uses it to act for the principal. Only that actor can use it.',
        ),
    })
    .describe(
      'Verified delegation, stamped by the ingress. The sender is either the current actor (acting under the token) or the one who handed it to the current actor (then `token` is set).',
    ),
);
export type OnBehalfOf = z.infer<typeof OnBehalfOf>;

const ClientMsgId = z
  .string()
  .min(1)
  .max(limits.maxClientMsgIdChars)
  .regex(/^[A-Za-z0-9_-]+$/, { message: 'letters, digits, _ and - only' })
  .describe('Chosen by the sender; a retry with the same id is deduplicated (2 minute window).');

/**
 * What a participant sends to `parley.in.<self>.send`. The ingress validates it, stamps the sender,
 * time and hop, and appends it to the room log.
 */
export const SendRequest = named(
  'SendRequest',
  z
    .object({
      clientMsgId: ClientMsgId,
      room: RoomId,
      kind: SendableKind.default('message'),
      parts: z.array(Part).min(1).max(limits.maxParts),
      mentions: z.array(ParticipantId).max(limits.maxMentions).default([]),
      replyTo: MessageId.optional(),
      causedBy: MessageId.optional().describe(
        'The message whose handling produced this one (the SDK sets it inside a handler).',
      ),
      hop: z
        .int()
        .min(0)
        .max(1000)
        .default(0)
        .describe('Hops from the human who started the conversation; causedBy.hop + 1.'),
      task: TaskId.optional(),
      provenance: Provenance.optional(),
      delegation: z
        .string()
        .max(8192)
        .optional()
        .describe('A delegation token (compact JWS) the sender acts under.'),
      metadata: z
        .record(z.string().max(64), z.string().max(1024))
        .refine((m) => Object.keys(m).length <= limits.maxMetadataEntries, {
          message: `metadata has more than ${limits.maxMetadataEntries} entries`,
        })
        .optional(),
    })
    .describe('A message to append to a room.'),
);
export type SendRequest = z.input<typeof SendRequest>;
export type SendRequestParsed = z.output<typeof SendRequest>;

/** The ingress's answer once JetStream stored the message. */
export const SendReply = named(
  'SendReply',
  z
    .object({
      id: MessageId,
      roomSeq: z.int().min(1).describe('Position of the message in the room log.'),
      duplicate: z.boolean().optional().describe('True when this was a retry of a stored message.'),
    })
    .describe('Reply to a send: sent only after JetStream acknowledged the message.'),
);
export type SendReply = z.infer<typeof SendReply>;

/** Who sent a message. */
export const Sender = named(
  'Sender',
  z
    .object({
      id: PrincipalId,
      kind: z.enum(['human', 'agent', 'service']),
      name: z.string().max(200).optional(),
    })
    .describe('The authenticated sender, stamped by the ingress.'),
);
export type Sender = z.infer<typeof Sender>;

/**
 * A message as stored in the room log (`PARLEY_ROOMS`) and delivered to inboxes. Its position in the
 * log travels in the `Parley-Room-Seq` header on delivery and as `seq` in history.
 */
export const RoomMessage = named(
  'RoomMessage',
  z
    .object({
      id: MessageId,
      room: RoomId,
      sender: Sender,
      kind: MessageKind,
      parts: z.array(Part).min(1).max(limits.maxParts),
      mentions: z.array(ParticipantId).default([]),
      replyTo: MessageId.optional(),
      causedBy: MessageId.optional(),
      hop: z.int().min(0),
      task: TaskId.optional(),
      provenance: Provenance.optional(),
      onBehalfOf: OnBehalfOf.optional(),
      clientMsgId: z.string().optional(),
      metadata: z.record(z.string(), z.string()).optional(),
      audience: z
        .enum(['members', 'mentions'])
        .optional()
        .describe('mentions = a private notice only the mentioned participants receive and read.'),
      trace: TraceContext.optional(),
      sentAt: z.iso.datetime().describe('When the ingress accepted it (UTC).'),
    })
    .describe('A message in a room log.'),
);
export type RoomMessage = z.infer<typeof RoomMessage>;
