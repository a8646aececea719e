import type * as z from 'zod';
import { subjects } from './subjects.js';

/** Who may call an API method. Services check it against the caller id taken from the subject. */
export type ApiAccess = 'participant' | 'human' | 'admin' | 'service' | 'any';

/**
 * Whether a method changes anything. A `write` method is refused to a participant whose standing is
 * not active (suspended, revoked, over budget), in one place: kit's serveApis. Undeclared = `write`,
 * so a new method is checked unless it says it only reads.
 */
export type ApiEffect = 'read' | 'write';

/** One request/reply method of a service, paired with its schemas. */
export interface ApiMethod<Req extends z.ZodType = z.ZodType, Res extends z.ZodType = z.ZodType> {
  service: string;
  method: string;
  summary: string;
  /** Who may call it: `participant` = any human or agent, `admin` = an org admin, `service` = a Parley service. */
  access: ApiAccess;
  /** See {@link ApiEffect}. */
  effect: ApiEffect;
  request: Req;
  response: Res;
  /** The subject a caller publishes to. */
  subject(callerId: string): string;
  /** The subject the service subscribes to (any caller). */
  listen: string;
}

/** Defines an API method; see {@link ApiMethod}. */
export function defineApi<Req extends z.ZodType, Res extends z.ZodType>(def: {
  service: string;
  method: string;
  summary: string;
  access: ApiAccess;
  /** @default write */
  effect?: ApiEffect;
  request: Req;
  response: Res;
}): ApiMethod<Req, Res> {
  return {
    ...def,
    effect: def.effect ?? 'write',
    subject: (callerId: string) => subjects.api(callerId, def.service, def.method),
    listen: subjects.apiListen(def.service, def.method),
  };
}

/** The request type a caller passes (defaults may be omitted). */
export type ApiRequest<M extends ApiMethod> = z.input<M['request']>;
/** The request type a handler receives (defaults filled in). */
export type ApiParsedRequest<M extends ApiMethod> = z.output<M['request']>;
/** The response type. */
export type ApiResponse<M extends ApiMethod> = z.output<M['response']>;
