/**
 * The declarative side of a bridge: a YAML document, validated by {@link BridgeMapping}, that says
 * which source event types go where (a fixed room, a room shared with one agent, or a room per case
 * key), how a payload becomes text and a data part, which source user is which Parley user, and
 * which outbound actions (tool calls) room messages may ask for.
 */
import { parse as parseYaml } from 'yaml';
import * as z from 'zod';

const RoomId = z.string().regex(/^room_[0-9A-Z]{26}$/, { message: 'a room id (room_…)' });
const ParticipantId = z.string().regex(/^(agt|usr)_[0-9A-Z]{26}$/, { message: 'an agt_… or usr_… id' });
const UserId = z.string().regex(/^usr_[0-9A-Z]{26}$/, { message: 'a usr_… id' });

/** Where a mapped event goes: exactly one of `room`, `agent` or `case`. */
export const Target = z
  .object({
    room: RoomId.optional().describe('A fixed room the bridge is a member of.'),
    agent: ParticipantId.optional().describe(
      'A room the bridge shares with this participant (created once).',
    ),
    case: z
      .object({
        key: z.string().min(1).describe('Template of the case key, e.g. "{{payload.recordIds.0}}".'),
        title: z.string().min(1).max(200).describe('Template of the room title.'),
        members: z.array(ParticipantId).max(50).default([]),
      })
      .optional()
      .describe('A room per case key (created on the first event of that key, reused after).'),
  })
  .refine((t) => [t.room, t.agent, t.case].filter((x) => x !== undefined).length === 1, {
    message: 'give exactly one of room, agent or case',
  });
export type Target = z.infer<typeof Target>;

/** One inbound rule: events of `type` → a message in the target room. */
export const InboundRule = z.object({
  type: z
    .string()
    .min(1)
    .describe('The source event type; a trailing `*` matches a prefix (e.g. "sap.s4.beh.salesorder.*").'),
  to: Target,
  text: z.string().min(1).max(4000).describe('Template of the text part ({{path}} into the event).'),
  data: z
    .union([z.literal(false), z.literal(true), z.record(z.string(), z.string())])
    .default(true)
    .describe('true: the payload as a data part; an object: a data part of rendered templates; false: none.'),
  mediaType: z.string().max(100).optional().describe('Media type of the data part.'),
  mentions: z.array(ParticipantId).max(20).default([]),
  task: z
    .object({ key: z.string().min(1).describe('Template of the task key, e.g. "{{payload.run.run_id}}".') })
    .optional()
    .describe(
      'Events of one key form a task: the first is sent as `task.assigned` (to the mentioned participants), later ones as `task.update`.',
    ),
  /** Action requests sent with the message, as data parts the named agent's bridge acts on. */
  ask: z
    .array(
      z.object({
        agent: ParticipantId,
        action: z.string().regex(/^[a-z][a-zA-Z0-9_.-]{0,63}$/),
        args: z.record(z.string(), z.string()).default({}).describe('Templates of the arguments.'),
      }),
    )
    .max(10)
    .default([]),
});
export type InboundRule = z.infer<typeof InboundRule>;

/** One outbound action: a room message asking for `action` runs `tool` as an authorized tool call. */
export const OutboundRule = z.object({
  action: z.string().regex(/^[a-z][a-zA-Z0-9_.-]{0,63}$/),
  tool: z
    .string()
    .regex(/^[a-z][a-z0-9_.-]{0,63}$/)
    .describe('The tool name governance authorizes (`tool:<tool>` unless `scope` says otherwise).'),
  scope: z.string().max(100).optional(),
  args: z
    .record(z.string(), z.string())
    .default({})
    .describe('Arguments the rule fixes (templates over {{args.…}}); they override what the request says.'),
  reply: z.string().max(4000).default('{{action}} done').describe('Template of the answer ({{result.…}}).'),
});
export type OutboundRule = z.infer<typeof OutboundRule>;

/** A source user and the Parley user the bridge acts for (through that user's delegation token). */
export const Identity = z
  .object({
    user: UserId,
    token: z.string().min(20).optional().describe('The delegation token the user issued to the bridge.'),
    tokenEnv: z
      .string()
      .regex(/^[A-Z_][A-Z0-9_]*$/)
      .optional()
      .describe('An environment variable holding that token (keeps secrets out of the mapping file).'),
  })
  .refine((i) => (i.token === undefined) !== (i.tokenEnv === undefined), {
    message: 'give exactly one of token or tokenEnv',
  });
export type Identity = z.infer<typeof Identity>;

/** The whole mapping document. */
export const BridgeMapping = z.object({
  bridge: z
    .string()
    .regex(/^[a-z][a-z0-9-]{0,31}$/)
    .describe('The bridge name (metrics label, log component, provenance source).'),
  inbound: z.array(InboundRule).max(200).default([]),
  outbound: z.array(OutboundRule).max(100).default([]),
  identities: z.record(z.string().min(1), Identity).default({}),
  /**
   * An event whose source user has no identity is refused (counted `unmapped_identity`) instead of
   * being posted on the bridge's own authority. @default false: posted, labelled external, with no
   * principal.
   */
  requireIdentity: z.boolean().default(false),
  deadLetterRoom: RoomId.optional().describe('Poison events are also reported in this room.'),
});
export type BridgeMapping = z.infer<typeof BridgeMapping>;

/** A mapping that failed validation: every problem, with its path in the document. */
export class MappingError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid bridge mapping:\n  ${problems.join('\n  ')}`);
    this.name = 'MappingError';
  }
}

/** Parses and validates a YAML mapping (or an object already parsed). */
export function loadMapping(source: string | unknown): BridgeMapping {
  let doc: unknown = source;
  if (typeof source === 'string') {
    try {
      doc = parseYaml(source);
    } catch (err) {
      throw new MappingError([`not YAML: ${(err as Error).message}`]);
    }
  }
  const r = BridgeMapping.safeParse(doc);
  if (!r.success) {
    throw new MappingError(r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
  }
  return r.data;
}

/** The inbound rule for an event type: an exact match first, then the longest matching prefix. */
export function ruleFor(mapping: BridgeMapping, type: string): InboundRule | undefined {
  const exact = mapping.inbound.find((r) => r.type === type);
  if (exact) return exact;
  let best: InboundRule | undefined;
  for (const r of mapping.inbound) {
    if (!r.type.endsWith('*')) continue;
    const prefix = r.type.slice(0, -1);
    if (type.startsWith(prefix) && (!best || prefix.length > best.type.length - 1)) best = r;
  }
  return best;
}

/** The value at a dot path (`payload.recordIds.0`), or undefined. */
export function lookup(scope: unknown, path: string): unknown {
  let v: unknown = scope;
  for (const key of path.split('.')) {
    // Own properties only: `constructor` or `__proto__` must not reach into the prototype.
    if (v === null || typeof v !== 'object' || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<string, unknown>)[key];
  }
  return v;
}

/**
 * Renders `{{path}}` placeholders from `scope`; arrays are joined with ", ", objects as JSON, a
 * missing value as "". A template is data, not code: nothing but dot paths is evaluated.
 */
export function render(template: string, scope: unknown): string {
  return template.replace(/\{\{\s*([\w.$-]+)\s*\}\}/g, (_m, path: string) => {
    const v = lookup(scope, path);
    if (v === undefined || v === null) return '';
    if (Array.isArray(v))
      return v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', ');
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
  });
}
