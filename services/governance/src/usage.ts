/**
 * Usage and budgets. Agents report usage on `parley.in.<id>.usage` (request/reply); governance
 * (queue group, any replica) counts each report once and aggregates it in `parley_usage`:
 *
 * - `day.<YYYY-MM-DD>.<participant>.<room|none>` — the finest rows, carrying owner and org, from
 *   which every view is summed at query time (by agent, owner, org, room or day);
 * - `total.<day|month>.<date>.<agent|owner>.<id>` — running totals the budgets are checked against.
 *
 * Every write is a compare-and-set, so replicas never lose each other's increments; cost is kept in
 * integer micro-dollars so sums are exact. A report is counted once: its `id` (or a fresh one) is the
 * `Nats-Msg-Id` of a `governance.usage.reported` event (the ledger), and a duplicate is not counted.
 *
 * Budgets (`budget.agent.<id>`, `budget.owner.<id>` in parley_policy) are checked after each report:
 * over a limit, the reporting agent is suspended (cause `budget`: its sends are then refused with
 * BUDGET_EXCEEDED), or with `pause_room` the report's room is paused; the owner is told.
 */
import { createHash } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  type Budget,
  callerOf,
  decodeJson,
  encodeJson,
  type governanceApi,
  isParticipantId,
  isServiceId,
  newId,
  ParleyError,
  type ParticipantId,
  request,
  roomsApi,
  serviceId,
  subjects,
  type Tracer,
  tasksApi,
  type UsageReply,
  UsageReport,
  type UsageRow,
} from '@parley/contracts';
import {
  type Logger,
  type ParleyMetrics,
  publishEvent,
  respondError,
  respondTo,
  snapshotKv,
  toParleyError,
  updateKv,
} from '@parley/kit';
import type { Directory } from './directory.js';
import type { KillSwitch } from './kill-switch.js';
import type { PolicyStore } from './policy-store.js';

const SELF = serviceId('governance');
const MAX_REPORT_BYTES = 4096;
const MAX_DAYS = 366;

interface Totals {
  inputTokens: number;
  outputTokens: number;
  /** Micro-dollars (exact sums). */
  costMicros: number;
  reports: number;
}

interface FineRow extends Totals {
  participant: string;
  owner: string;
  org: string;
  room?: string;
  task?: string;
  binding?: string;
}

/** The key token of a binding id (any characters of it; hashed so it is a safe key token). */
const bindingToken = (b: string) => createHash('sha256').update(b).digest('hex').slice(0, 32);

/** What usage needs. */
export interface UsageDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  kv: KV;
  store: PolicyStore;
  directory: Directory;
  killSwitch: KillSwitch;
  log: Logger;
  tracer?: Tracer | undefined;
  metrics?: ParleyMetrics | undefined;
  /** Where reports are received and answered (least privilege; see kit ServiceResponder). @default nc */
  responder?: NatsConnection | undefined;
}

const dayOf = (d: Date) => d.toISOString().slice(0, 10);
const monthOf = (d: Date) => d.toISOString().slice(0, 7);
const zero = (): Totals => ({ inputTokens: 0, outputTokens: 0, costMicros: 0, reports: 0 });

/** Read-modify-write with compare-and-set, retried on conflicts. Returns [before, after]. */
async function casAdd<T extends Totals>(kv: KV, key: string, init: () => T, add: Totals): Promise<[T, T]> {
  const r = await updateKv<T>(
    kv,
    key,
    (c) => {
      const current = c ?? init();
      return {
        ...current,
        inputTokens: current.inputTokens + add.inputTokens,
        outputTokens: current.outputTokens + add.outputTokens,
        costMicros: current.costMicros + add.costMicros,
        reports: current.reports + add.reports,
      };
    },
    { attempts: 50 },
  );
  return [r.previous ?? init(), r.value as T];
}

const toRow = (key: string, t: Totals): UsageRow => ({
  key,
  inputTokens: t.inputTokens,
  outputTokens: t.outputTokens,
  costUsd: t.costMicros / 1e6,
  reports: t.reports,
});

/** Which limits of `budget` the totals are over. */
function over(budget: Budget, day: Totals, month: Totals): { limit: string; value: number; used: number }[] {
  const out: { limit: string; value: number; used: number }[] = [];
  const tokens = (t: Totals) => t.inputTokens + t.outputTokens;
  if (budget.tokensPerDay !== undefined && tokens(day) > budget.tokensPerDay)
    out.push({ limit: 'tokensPerDay', value: budget.tokensPerDay, used: tokens(day) });
  if (budget.tokensPerMonth !== undefined && tokens(month) > budget.tokensPerMonth)
    out.push({ limit: 'tokensPerMonth', value: budget.tokensPerMonth, used: tokens(month) });
  if (budget.costUsdPerDay !== undefined && day.costMicros > budget.costUsdPerDay * 1e6)
    out.push({ limit: 'costUsdPerDay', value: budget.costUsdPerDay, used: day.costMicros / 1e6 });
  if (budget.costUsdPerMonth !== undefined && month.costMicros > budget.costUsdPerMonth * 1e6)
    out.push({ limit: 'costUsdPerMonth', value: budget.costUsdPerMonth, used: month.costMicros / 1e6 });
  return out;
}

/** Builds usage ingestion, budgets and queries. */
export function createUsage(deps: UsageDeps) {
  const { kv, store, directory } = deps;
  const log = deps.log.child({ component: 'usage' });
  let sub: Subscription | undefined;

  async function enforce(
    kind: 'agent' | 'owner',
    id: string,
    agent: string,
    room: string | undefined,
    before: [Totals, Totals],
    after: [Totals, Totals],
  ): Promise<string[]> {
    const budget = store.budget(kind, id);
    if (!budget) return [];
    const crossed = over(budget, after[0], after[1]);
    if (crossed.length === 0) return [];
    const wasOver = over(budget, before[0], before[1]).length > 0;
    const facts = await directory.agent(agent);
    const what = crossed.map((c) => `${kind} ${c.limit} ${c.value} (used ${c.used})`).join(', ');
    const reason = `budget exceeded: ${what}`;
    if (!wasOver) {
      await publishEvent(deps.js, 'governance', 'budget.exceeded', {
        actor: SELF,
        subject: agent,
        data: {
          budget: kind,
          of: id,
          owner: facts.owner,
          crossed,
          onExceed: budget.onExceed,
          ...(room ? { room } : {}),
        },
      }).catch((err) => log.warn({ err }, 'event not published'));
    }
    if (budget.onExceed === 'pause_room' && room) {
      if (!wasOver) {
        await request(deps.nc, SELF, roomsApi.pause, { room, reason }, { tracer: deps.tracer }).catch((err) =>
          log.warn({ err, room }, 'room not paused'),
        );
        await deps.killSwitch.notify(
          facts.owner,
          `Room ${room} was paused: ${facts.name} (${agent}) crossed its ${reason}.`,
          { event: 'budget.exceeded', agent, room, crossed },
          `budget:${agent}:${room}:${kind}:${after[0].reports}`,
        );
      }
    } else {
      const s = store.standing(agent);
      if (!(s?.status === 'suspended' && s.cause === 'budget') && s?.status !== 'revoked') {
        await deps.killSwitch.suspendAgent(facts, SELF, reason, 'budget');
      }
    }
    return crossed.map((c) => `${kind} ${c.limit}`);
  }

  /**
   * The room a report names, checked before anything is counted or done with it: the reporter must
   * be a current member (else NOT_A_MEMBER; an unknown room is NOT_FOUND), and a `message` is taken
   * only together with its `room`. Returns whether the room is the reporter's own tenant's (its
   * owner is in the reporter's org): only then may a budget pause it.
   */
  async function verifyRoom(
    caller: string,
    org: string,
    report: ReturnType<typeof UsageReport.parse>,
  ): Promise<boolean> {
    if (!report.room) {
      if (report.message) {
        throw new ParleyError(
          'INVALID_ARGUMENT',
          'a usage report names a message only together with its room',
        );
      }
      return false;
    }
    const r = await request(
      deps.nc,
      SELF,
      roomsApi.members,
      { room: report.room, participants: [caller as ParticipantId] },
      { tracer: deps.tracer },
    );
    if (!r.members.includes(caller)) {
      throw new ParleyError('NOT_A_MEMBER', `${caller} is not a member of room ${report.room}`);
    }
    if (r.owner === caller) return true;
    return (await directory.find(r.owner))?.org === org;
  }

  /** Adds a report's cost to its task (which fails with BUDGET_EXCEEDED past its budget). */
  async function chargeTask(caller: string, task: string, costUsd: number, report: string): Promise<boolean> {
    if (costUsd <= 0) return false;
    try {
      const r = await request(
        deps.nc,
        SELF,
        tasksApi.usage,
        { task, costUsd, report, reporter: caller },
        { tracer: deps.tracer },
      );
      return r.exceeded;
    } catch (err) {
      deps.log.warn({ err, task }, 'task cost not added');
      return false;
    }
  }

  /** Counts one report of `caller`. */
  async function count(caller: string, report: ReturnType<typeof UsageReport.parse>): Promise<UsageReply> {
    const facts = await directory.participant(caller);
    const ownTenantRoom = await verifyRoom(caller, facts.org, report);
    if (report.task) {
      // A task's cost is the reporter's to claim only if it works on it or asked for it.
      const t = await request(deps.nc, SELF, tasksApi.get, { task: report.task }, { tracer: deps.tracer });
      if (t.assignee !== caller && t.requester !== caller) {
        throw new ParleyError(
          'PERMISSION_DENIED',
          `${caller} neither works on nor asked for task ${report.task}`,
        );
      }
    }
    const owner = facts.kind === 'agent' ? facts.owner : caller;
    const ledgerId = `usage:${caller}:${report.id ?? newId('event').slice(4)}`;
    const now = new Date();
    const ack = await deps.js.publish(
      subjects.event('governance', 'usage.reported'),
      encodeJson({
        id: newId('event'),
        domain: 'governance',
        kind: 'usage.reported',
        at: now.toISOString(),
        actor: caller,
        subject: caller,
        data: { ...report, owner, org: facts.org },
      }),
      { msgID: ledgerId },
    );
    if (ack.duplicate) return { counted: false, exceeded: [] };
    const add: Totals = {
      inputTokens: report.inputTokens,
      outputTokens: report.outputTokens,
      costMicros: Math.round(report.costUsd * 1e6),
      reports: 1,
    };
    const day = dayOf(now);
    const month = monthOf(now);
    const fine = `day.${day}.${caller}.${report.room ?? 'none'}`;
    const initFine = (): FineRow => ({
      participant: caller,
      owner,
      org: facts.org,
      ...(report.room ? { room: report.room } : {}),
      ...zero(),
    });
    const byTask =
      report.task || report.binding
        ? [
            casAdd(
              kv,
              `tday.${day}.${caller}.${report.task ?? 'none'}.${report.binding ? bindingToken(report.binding) : 'none'}`,
              () => ({
                ...initFine(),
                ...(report.task ? { task: report.task } : {}),
                ...(report.binding ? { binding: report.binding } : {}),
              }),
              add,
            ),
          ]
        : [];
    const [, agentDay, agentMonth, ownerDay, ownerMonth] = await Promise.all([
      casAdd(kv, fine, initFine, add),
      casAdd(kv, `total.day.${day}.agent.${caller}`, zero, add),
      casAdd(kv, `total.month.${month}.agent.${caller}`, zero, add),
      casAdd(kv, `total.day.${day}.owner.${owner}`, zero, add),
      casAdd(kv, `total.month.${month}.owner.${owner}`, zero, add),
      ...byTask,
    ]);
    const overTask = report.task ? await chargeTask(caller, report.task, report.costUsd, ledgerId) : false;
    if (facts.kind !== 'agent') return { counted: true, exceeded: overTask ? ['task budget'] : [] };
    const exceeded = [
      ...(overTask ? ['task budget'] : []),
      ...(await enforce(
        'agent',
        caller,
        caller,
        ownTenantRoom ? report.room : undefined,
        [agentDay[0], agentMonth[0]],
        [agentDay[1], agentMonth[1]],
      )),
      ...(await enforce(
        'owner',
        owner,
        caller,
        ownTenantRoom ? report.room : undefined,
        [ownerDay[0], ownerMonth[0]],
        [ownerDay[1], ownerMonth[1]],
      )),
    ];
    return { counted: true, exceeded };
  }

  async function handle(msg: Msg): Promise<void> {
    try {
      const caller = callerOf(msg.subject);
      if (!isParticipantId(caller))
        throw new ParleyError('UNAUTHENTICATED', `${caller} is not a participant`);
      const report = decodeJson(UsageReport, msg.data, { maxBytes: MAX_REPORT_BYTES, what: 'usage report' });
      const reply = await count(caller, report);
      respondTo(msg, encodeJson(reply), { watch: { log, metrics: deps.metrics } });
    } catch (err) {
      respondError(msg, toParleyError(err, log), { log, metrics: deps.metrics });
    }
  }

  return {
    start() {
      sub = (deps.responder ?? deps.nc).subscribe(subjects.usageListen(), {
        queue: 'governance',
        callback: (err, msg) => {
          if (!err) void handle(msg);
        },
      });
    },
    async stop() {
      await sub?.drain().catch(() => undefined);
    },

    async setBudget(
      req: ApiParsedRequest<typeof governanceApi.setBudget>,
      caller: string,
    ): Promise<ApiResponse<typeof governanceApi.setBudget>> {
      const limits = {
        ...(req.tokensPerDay !== undefined ? { tokensPerDay: req.tokensPerDay } : {}),
        ...(req.tokensPerMonth !== undefined ? { tokensPerMonth: req.tokensPerMonth } : {}),
        ...(req.costUsdPerDay !== undefined ? { costUsdPerDay: req.costUsdPerDay } : {}),
        ...(req.costUsdPerMonth !== undefined ? { costUsdPerMonth: req.costUsdPerMonth } : {}),
      };
      const kind = req.agent ? 'agent' : 'owner';
      const id = (req.agent ?? req.owner) as string;
      if (!isServiceId(caller)) {
        const me = await directory.human(caller);
        const target = kind === 'agent' ? await directory.agent(id) : await directory.human(id);
        const adminOfIt = me.superadmin || (me.role === 'admin' && me.org === target.org);
        const ownsIt = kind === 'agent' && target.kind === 'agent' && target.owner === caller;
        if (!adminOfIt && !ownsIt) {
          // Only an admin may cap an owner; an agent's owner may cap the agent.
          throw new ParleyError(
            target.org === me.org ? 'PERMISSION_DENIED' : 'NOT_FOUND',
            target.org === me.org
              ? `only ${kind === 'agent' ? 'its owner or ' : ''}an admin may set this budget`
              : `${id} does not exist`,
          );
        }
      } else {
        await (kind === 'agent' ? directory.agent(id) : directory.human(id));
      }
      const budget: Budget = {
        kind,
        id,
        ...limits,
        onExceed: req.onExceed,
        by: caller as Budget['by'],
        at: new Date().toISOString(),
      };
      return store.setBudget(budget);
    },

    async query(
      req: ApiParsedRequest<typeof governanceApi.usage>,
      caller: string,
    ): Promise<ApiResponse<typeof governanceApi.usage>> {
      const today = dayOf(new Date());
      const since = req.since ?? today;
      const until = req.until ?? today;
      if (since > until)
        throw new ParleyError('INVALID_ARGUMENT', `since (${since}) is after until (${until})`);
      const days: string[] = [];
      for (
        let d = new Date(`${since}T00:00:00Z`);
        dayOf(d) <= until;
        d = new Date(d.getTime() + 86_400_000)
      ) {
        days.push(dayOf(d));
        if (days.length > MAX_DAYS)
          throw new ParleyError('INVALID_ARGUMENT', `at most ${MAX_DAYS} days at once`);
      }
      const me = isServiceId(caller) ? undefined : await directory.participant(caller);
      const seesAll = !me || (me.kind === 'human' && me.superadmin);
      const visible = (r: FineRow) =>
        seesAll ||
        r.participant === caller ||
        r.owner === caller ||
        (me?.kind === 'human' && me.role === 'admin' && r.org === me.org);
      const groups = new Map<string, Totals>();
      const total = zero();
      for (const day of days) {
        const family = req.by === 'task' || req.by === 'binding' ? 'tday' : 'day';
        for (const e of (await snapshotKv(kv, `${family}.${day}.>`)).values()) {
          const r = e.json<FineRow>();
          if (!visible(r)) continue;
          if (req.org && r.org !== req.org) continue;
          if (req.agent && r.participant !== req.agent) continue;
          const key =
            req.by === 'agent'
              ? r.participant
              : req.by === 'owner'
                ? r.owner
                : req.by === 'org'
                  ? r.org
                  : req.by === 'room'
                    ? (r.room ?? '-')
                    : req.by === 'task'
                      ? (r.task ?? '-')
                      : req.by === 'binding'
                        ? (r.binding ?? '-')
                        : day;
          const g = groups.get(key) ?? zero();
          for (const t of [g, total]) {
            t.inputTokens += r.inputTokens;
            t.outputTokens += r.outputTokens;
            t.costMicros += r.costMicros;
            t.reports += r.reports;
          }
          groups.set(key, g);
        }
      }
      const rows = [...groups].map(([k, t]) => toRow(k, t)).sort((a, b) => a.key.localeCompare(b.key));
      return { by: req.by, since, until, rows, total: toRow('total', total) };
    },
  };
}
