/**
 * Usage reporting: `agent.usage.report({ model, inputTokens, outputTokens, costUsd })` after each
 * model call. Inside a handler the report is tied to the room and message being handled. Governance
 * counts it once (retries reuse its id), adds it to the aggregates by agent, owner, org, room and
 * day, and checks budgets: the reply says which ones it crossed (the agent may then be suspended).
 */
import {
  decodeReply,
  encodeJson,
  isParleyError,
  newId,
  type ReplyMsg,
  requestFailure,
  subjects,
  UsageReply,
  type UsageReport,
} from '@parley/contracts';
import type { Agent } from './agent.js';
import { handling } from './handling.js';
import { retryIdempotent } from './retry.js';

/** A participant's usage reports: `agent.usage`. */
export class UsageReporter {
  readonly #agent: Agent;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent) {
    this.#agent = agent;
  }

  /**
   * Reports usage; resolves once governance counted it. Retries while governance is unreachable
   * (the same id, so it is counted once) for up to `deadlineMs`.
   */
  async report(report: UsageReport, options: { deadlineMs?: number } = {}): Promise<UsageReply> {
    const ctx = handling.getStore();
    const body: UsageReport = {
      ...report,
      id: report.id ?? newId('event').slice(4),
      ...((report.room ?? ctx?.room) ? { room: report.room ?? ctx?.room } : {}),
      ...((report.message ?? ctx?.messageId) ? { message: report.message ?? ctx?.messageId } : {}),
    };
    const subject = subjects.usage(this.#agent.id);
    const data = encodeJson(body);
    return retryIdempotent(
      async () => {
        let reply: ReplyMsg;
        try {
          reply = await this.#agent.nc.request(subject, data, { timeout: 5_000 });
        } catch (err) {
          throw requestFailure(err, subject);
        }
        return decodeReply(UsageReply, reply, 'usage reply');
      },
      {
        deadlineMs: options.deadlineMs ?? 10_000,
        retryable: (err) => isParleyError(err, 'UNAVAILABLE') || isParleyError(err, 'DEADLINE_EXCEEDED'),
      },
    );
  }
}
