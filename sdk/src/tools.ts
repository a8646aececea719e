/**
 * Authorized tool calls: `agent.tools.call(name, args, fn, { onBehalfOf })` asks governance whether
 * the call may happen (under a delegation token, or on the agent's own authority), runs `fn` inside
 * an `execute_tool <name>` span, and records the call (a digest of the arguments, the outcome, the
 * duration). A refusal throws before `fn` runs: PERMISSION_DENIED (or EXPIRED, REVOKED, SUSPENDED…)
 * with governance's reason and which link of the chain decided.
 *
 * Allows are cached for the time governance grants (`ttlMs`, 2 s by default). Governance tells this
 * participant on `_INBOX.<id>.policy` when a token of a cached allow is revoked or someone in its
 * chain is suspended, and the cache is dropped at once.
 */
import { createHash } from 'node:crypto';
import type { Subscription } from '@nats-io/transport-node';
import {
  type ApiResponse,
  approvalsApi,
  defaultTracer,
  governanceApi,
  newId,
  ParleyError,
  runInSpan,
  startToolSpan,
  subjects,
  tasksApi,
  traceAttributes,
} from '@parley/contracts';
import { LRUCache } from 'lru-cache';
import type { Agent } from './agent.js';
import { handling } from './handling.js';

/** Options of {@link Tools.call}. */
export interface ToolCallOptions {
  /**
   * The delegation token to act under. Inside a handler, the token the handled message handed to
   * this agent is used by default; `null` acts on the agent's own authority (its owner's).
   */
  onBehalfOf?: string | null;
  /** The scope the call needs. @default `tool:<name>` */
  action?: string;
  /** The call's id (`tc_…`). @default a new one */
  id?: string;
  /** Reuse a cached allow. @default true */
  cache?: boolean;
  /**
   * The task this call is a side effect of (its assignee calls): the call is recorded under the
   * task with `idempotencyKey`, and a retry with the same key returns the recorded result without
   * running `fn` again — also from another process after a crash.
   */
  task?: string;
  /** The side effect's key within the task. @default `<name>:<digest of args>` */
  idempotencyKey?: string;
  /**
   * Undoes the side effect (gets what `fn` returned) when the task fails or is canceled: run once,
   * newest first, audited. For a compensation that survives a restart use `agent.tasks.compensator`.
   */
  compensate?: (result: unknown) => unknown | Promise<unknown>;
  /** Why the call is wanted, shown to the approver when org policy holds it for approval. */
  approvalReason?: string;
  /** How long the approvers have before the call fails with APPROVAL_TIMEOUT, in ms. @default 300000 */
  approvalTimeoutMs?: number;
}

type Decision = ApiResponse<typeof governanceApi.authorize>;

/** Canonical JSON (sorted keys), so equal arguments have equal digests. */
function canonical(value: unknown): string {
  if (value === undefined) return 'null';
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
}

/** `sha256=<hex>` of the canonical JSON of `args`: what the audit keeps instead of the arguments. */
export function argsDigest(args: unknown): string {
  return `sha256=${createHash('sha256').update(canonical(args)).digest('hex')}`;
}

/** A participant's tool calls: `agent.tools`. */
export class Tools {
  readonly #agent: Agent;
  readonly #cache = new LRUCache<string, { decision: Decision; until: number }>({ max: 1_000 });
  #notices: Subscription | undefined;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent) {
    this.#agent = agent;
  }

  /** Drops every cached decision (also done when governance says one no longer holds). */
  invalidate(): void {
    this.#cache.clear();
  }

  /** Allows currently cached. */
  get cached(): number {
    return this.#cache.size;
  }

  #listen(): void {
    if (this.#notices || this.#agent.nc.isClosed()) return;
    this.#notices = this.#agent.nc.subscribe(subjects.policyNotice(this.#agent.id), {
      callback: () => this.invalidate(),
    });
  }

  /** Asks governance (or the cache) whether `action` may happen. */
  async authorize(
    action: string,
    options: { token?: string | undefined; tool?: string; toolCall?: string; cache?: boolean } = {},
  ): Promise<Decision> {
    this.#listen();
    const key = `${options.token ?? '-'}|${action}`;
    const hit = this.#cache.get(key);
    if (options.cache !== false && hit && hit.until > Date.now()) return hit.decision;
    const ctx = handling.getStore();
    const decision = await this.#agent.call(governanceApi.authorize, {
      action,
      ...(options.token ? { token: options.token } : {}),
      ...(options.tool ? { tool: options.tool } : {}),
      ...(options.toolCall ? { toolCall: options.toolCall } : {}),
      ...(ctx ? { message: ctx.messageId } : {}),
      ...(ctx?.causedBy ? { causedBy: ctx.causedBy } : {}),
    });
    if (decision.allow && decision.ttlMs > 0) {
      this.#cache.set(key, { decision, until: Date.now() + decision.ttlMs });
    } else {
      this.#cache.delete(key);
    }
    return decision;
  }

  /**
   * Authorizes, runs `fn(args)` in an `execute_tool <name>` span, records the call and returns
   * what `fn` returned. Refused calls throw the decision's code with its reason; `fn` never runs.
   */
  async call<A, T>(
    name: string,
    args: A,
    fn: (args: A) => T | Promise<T>,
    options: ToolCallOptions = {},
  ): Promise<T> {
    const ctx = handling.getStore();
    const token = options.onBehalfOf === null ? undefined : (options.onBehalfOf ?? ctx?.delegation);
    const action = options.action ?? `tool:${name}`;
    const id = options.id ?? newId('toolCall');
    const digest = argsDigest(args);
    const decision = await this.authorize(action, {
      token,
      tool: name,
      toolCall: id,
      ...(options.cache === false ? { cache: false } : {}),
    });
    const record = (status: 'ok' | 'error', durationMs: number, error?: string) =>
      this.#agent
        .call(governanceApi.recordToolCall, {
          id,
          tool: name,
          action,
          argsDigest: digest,
          status,
          durationMs,
          ...(error ? { error } : {}),
          ...(token ? { token } : {}),
          ...(ctx ? { message: ctx.messageId } : {}),
          ...(ctx?.causedBy ? { causedBy: ctx.causedBy } : {}),
        })
        // The call's outcome stands either way; the dropped audit record is reported.
        .catch((err: unknown) =>
          this.#agent.reportFailure(err, 'tool_audit', { toolCall: id, tool: name, status }),
        );
    if (!decision.allow && decision.code === 'APPROVAL_REQUIRED') {
      await this.#awaitApproval({ id, name, action, digest, token, ctx, options });
    } else if (!decision.allow) {
      // Governance audited the denial when it decided (the audit chain reads it from there).
      throw new ParleyError(decision.code ?? 'PERMISSION_DENIED', `${name}: ${decision.reason}`, {
        details: { toolCall: id, action, decidedBy: decision.decidedBy, chain: decision.chain },
      });
    }
    if (options.task)
      return this.#callUnderTask(options.task, name, args, fn, { ...options, id, digest, record });
    const span = startToolSpan(defaultTracer(), name, {
      [traceAttributes.toolCallId]: id,
      [traceAttributes.decision]: 'allow',
      ...(decision.principal ? { [traceAttributes.onBehalfOf]: decision.principal } : {}),
    });
    const started = performance.now();
    try {
      const result = await runInSpan(span, async () => fn(args));
      await record('ok', performance.now() - started);
      return result;
    } catch (err) {
      const code = (err as { code?: unknown })?.code;
      await record(
        'error',
        performance.now() - started,
        typeof code === 'string' ? code : (err as Error)?.name,
      );
      throw err;
    }
  }

  /** Asks for an approval and waits for it; throws APPROVAL_DENIED / APPROVAL_TIMEOUT. */
  async #awaitApproval(o: {
    id: string;
    name: string;
    action: string;
    digest: string;
    token: string | undefined;
    ctx: ReturnType<typeof handling.getStore>;
    options: ToolCallOptions;
  }): Promise<void> {
    const asked = await this.#agent.call(approvalsApi.requestApproval, {
      id: o.id,
      action: o.action,
      tool: o.name,
      argsDigest: o.digest,
      ...(o.token ? { token: o.token } : {}),
      ...(o.options.approvalReason ? { reason: o.options.approvalReason } : {}),
      ...(o.options.task ? { task: o.options.task } : {}),
      ...(o.ctx?.room ? { room: o.ctx.room } : {}),
      ...(o.options.approvalTimeoutMs ? { timeoutMs: o.options.approvalTimeoutMs } : {}),
    });
    const a = asked.state === 'pending' ? await this.#agent.approvals.wait(o.id) : asked;
    if (a.state === 'approved') return;
    const details = { toolCall: o.id, action: o.action, approvers: a.approvers, decidedBy: a.decidedBy };
    await this.#agent
      .call(governanceApi.recordToolCall, {
        id: o.id,
        tool: o.name,
        action: o.action,
        argsDigest: o.digest,
        status: 'denied',
        durationMs: 0,
        error: a.state === 'denied' ? 'APPROVAL_DENIED' : 'APPROVAL_TIMEOUT',
        ...(o.token ? { token: o.token } : {}),
      })
      .catch(() => undefined);
    if (a.state === 'denied') {
      throw new ParleyError('APPROVAL_DENIED', `${o.name}: ${a.decidedBy} denied it: ${a.decision ?? ''}`, {
        details,
      });
    }
    throw new ParleyError('APPROVAL_TIMEOUT', `${o.name}: nobody approved it before ${a.expiresAt}`, {
      details,
    });
  }

  /** A call recorded as a side effect of a task (see {@link ToolCallOptions.task}). */
  async #callUnderTask<A, T>(
    task: string,
    name: string,
    args: A,
    fn: (args: A) => T | Promise<T>,
    o: ToolCallOptions & {
      id: string;
      digest: string;
      record: (status: 'ok' | 'error', durationMs: number, error?: string) => Promise<unknown>;
    },
  ): Promise<T> {
    const key = o.idempotencyKey ?? `${name}:${o.digest.slice('sha256='.length, 'sha256='.length + 32)}`;
    const effect = (phase: 'begin' | 'done' | 'error', extra: { result?: unknown; error?: string } = {}) =>
      this.#agent.call(tasksApi.effect, {
        task,
        key,
        phase,
        tool: name,
        toolCall: o.id,
        argsDigest: o.digest,
        compensable: o.compensate !== undefined,
        ...extra,
      });
    const begun = await effect('begin');
    if (begun.replay) {
      if (o.compensate) this.#agent.tasks.registerCompensation(task, key, o.compensate);
      return begun.effect.result as T;
    }
    const span = startToolSpan(defaultTracer(), name, {
      [traceAttributes.toolCallId]: o.id,
      [traceAttributes.decision]: 'allow',
    });
    const started = performance.now();
    let result: T;
    try {
      result = await runInSpan(span, async () => fn(args));
    } catch (err) {
      const code = (err as { code?: unknown })?.code;
      const error = typeof code === 'string' ? code : ((err as Error)?.name ?? 'Error');
      await o.record('error', performance.now() - started, error);
      await effect('error', { error }).catch(() => undefined);
      throw err;
    }
    if (o.compensate) this.#agent.tasks.registerCompensation(task, key, o.compensate);
    // Recorded before returning: once the caller sees the result, a retry replays it.
    await effect('done', result === undefined ? {} : { result: JSON.parse(JSON.stringify(result)) });
    await o.record('ok', performance.now() - started);
    return result;
  }

  /** Stops listening for policy notices. */
  close(): void {
    this.#notices?.unsubscribe();
    this.#notices = undefined;
  }
}
