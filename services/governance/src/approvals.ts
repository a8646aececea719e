/**
 * Approval gates (see "Approval gates" in docs/architecture.md). A held tool call is one entry,
 * `approval.<toolCallId>` in `parley_policy`, moved `pending → approved | denied | timed_out` by
 * compare-and-set only, so two approvers (or an approver and the timeout) cannot both win. The
 * approvers are pinged in their notice rooms; the requester long-polls `awaitApproval`. A timeout is
 * applied by whoever touches the entry after its expiry (the waiting requester, a late approver, a
 * listing), so no timer has to run anywhere. Every step is an audit record (domain `approval`).
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  Approval,
  type approvalsApi,
  isServiceId,
  isUserId,
  ParleyError,
  type PrincipalId,
  registryApi,
  request,
  roomsApi,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { isKvConflict, type KvWatch, type Logger, watchKv } from '@parley/kit';
import { audit } from './audit.js';
import type { Outcome } from './authorization.js';
import type { Directory } from './directory.js';

const SELF = serviceId('governance');
const PREFIX = 'approval.';
const enc = new TextEncoder();

type Req<M extends keyof typeof approvalsApi> = ApiParsedRequest<(typeof approvalsApi)[M]>;
type Res<M extends keyof typeof approvalsApi> = ApiResponse<(typeof approvalsApi)[M]>;

/** What approvals need. */
export interface ApprovalsDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  /** parley_policy */
  kv: KV;
  directory: Directory;
  /** authorize's decision, uncached and unaudited. */
  decide(caller: string, req: { action: string; token?: string }): Promise<Outcome>;
  log: Logger;
  tracer?: Tracer | undefined;
}

/** Builds the approval methods. */
export function createApprovals(deps: ApprovalsDeps) {
  const { kv, js, log } = deps;
  const view = new Map<string, Approval>();
  const waiters = new Map<string, Set<() => void>>();
  let watch: KvWatch | undefined;

  async function read(id: string): Promise<{ value: Approval; revision: number }> {
    const e = await kv.get(`${PREFIX}${id}`);
    if (e?.operation !== 'PUT' || e.length === 0) throw new ParleyError('NOT_FOUND', `no approval ${id}`);
    return { value: Approval.parse(e.json()), revision: e.revision };
  }

  async function notify(to: string, text: string, data: Record<string, unknown>, key: string) {
    await request(deps.nc, SELF, roomsApi.notify, { to, text, data, key }, { tracer: deps.tracer }).catch(
      (err) => log.warn({ err, to }, 'approval notice not delivered'),
    );
  }

  /** Moves a pending approval on (compare-and-set); answers the entry as it ends up. */
  async function settle(
    id: string,
    change: (a: Approval) => Approval | undefined,
  ): Promise<{ value: Approval; changed: boolean }> {
    for (let i = 0; i < 10; i++) {
      const { value, revision } = await read(id);
      const next = change(value);
      if (!next) return { value, changed: false };
      try {
        await kv.update(`${PREFIX}${id}`, enc.encode(JSON.stringify(next)), revision);
        view.set(id, next);
        return { value: next, changed: true };
      } catch (err) {
        if (!isKvConflict(err)) throw err;
      }
    }
    throw new ParleyError('UNAVAILABLE', `too much contention on approval ${id}`, { retryAfterMs: 100 });
  }

  /** Applies the timeout to an expired pending approval. */
  async function expire(a: Approval): Promise<Approval> {
    if (a.state !== 'pending' || Date.parse(a.expiresAt) > Date.now()) return a;
    const { value, changed } = await settle(a.id, (cur) =>
      cur.state === 'pending'
        ? { ...cur, state: 'timed_out', decidedAt: new Date().toISOString() }
        : undefined,
    );
    if (changed) {
      await audit(js, {
        domain: 'approval',
        action: 'timed_out',
        actor: SELF,
        target: a.id,
        toolCall: a.id,
        ...(a.room ? { room: a.room } : {}),
        decision: { allow: false, reason: `nobody answered before ${a.expiresAt}`, decidedBy: 'timeout' },
        data: { tool: a.tool, action: a.action, requester: a.requester, approvers: a.approvers },
      });
    }
    return value;
  }

  async function approversOf(o: Outcome, caller: string): Promise<string[]> {
    const rule = o.approval;
    if (!rule) return [];
    const principal = o.principal ?? caller;
    if (rule.approver === 'principal') return isUserId(principal) ? [principal] : [];
    if (rule.approver === 'owner') {
      const me = await deps.directory.participant(caller);
      return me.kind === 'agent' ? [me.owner] : [caller];
    }
    if (rule.approver === 'org_admin') {
      const { users } = await request(
        deps.nc,
        SELF,
        registryApi.listUsers,
        { ...(o.approvalOrg ? { org: o.approvalOrg } : {}) },
        { tracer: deps.tracer },
      );
      return users.filter((u) => u.role === 'admin').map((u) => u.id);
    }
    return [rule.approver];
  }

  function onEntry(e: KvEntry): void {
    const id = e.key.slice(PREFIX.length);
    if (e.operation !== 'PUT' || e.length === 0) view.delete(id);
    else {
      const parsed = Approval.safeParse(e.json());
      if (parsed.success) view.set(id, parsed.data);
    }
    for (const wake of waiters.get(id) ?? []) wake();
  }

  return {
    async start(): Promise<void> {
      watch = await watchKv(kv, {
        key: `${PREFIX}>`,
        onEntry,
        onError: (err) => log.warn({ err }, 'bad approval'),
        log,
      });
      await watch.initialized;
    },
    stop(): void {
      watch?.stop();
      for (const set of waiters.values()) for (const wake of set) wake();
    },

    async requestApproval(req: Req<'requestApproval'>, caller: string): Promise<Res<'requestApproval'>> {
      const existing = await read(req.id).catch(() => undefined);
      if (existing) {
        if (existing.value.requester !== caller)
          throw new ParleyError('CONFLICT', `${req.id} is another call`);
        return expire(existing.value);
      }
      const outcome = await deps.decide(caller, {
        action: req.action,
        ...(req.token ? { token: req.token } : {}),
      });
      const d = outcome.decision;
      if (d.allow) throw new ParleyError('CONFLICT', `${req.action} needs no approval: call it`);
      if (d.code !== 'APPROVAL_REQUIRED' || !outcome.approval) {
        throw new ParleyError(d.code ?? 'PERMISSION_DENIED', d.reason, {
          details: { decidedBy: d.decidedBy },
        });
      }
      const approvers = (await approversOf(outcome, caller)).filter((a) => a !== caller);
      if (approvers.length === 0) {
        throw new ParleyError(
          'PERMISSION_DENIED',
          `${req.action} needs approval by ${outcome.approval.approver}, and nobody but the caller fills that role`,
        );
      }
      const now = new Date();
      const approval: Approval = {
        id: req.id,
        state: 'pending',
        requester: caller,
        principal: outcome.principal ?? caller,
        chain: outcome.chain,
        tool: req.tool,
        action: req.action,
        argsDigest: req.argsDigest,
        rule: outcome.approval,
        approvers,
        ...(req.reason ? { reason: req.reason } : {}),
        ...(req.task ? { task: req.task } : {}),
        ...(req.room ? { room: req.room } : {}),
        createdAt: now.toISOString(),
        expiresAt: new Date(now.getTime() + req.timeoutMs).toISOString(),
      };
      try {
        await kv.create(`${PREFIX}${req.id}`, enc.encode(JSON.stringify(approval)));
      } catch (err) {
        if (isKvConflict(err)) return (await read(req.id)).value;
        throw err;
      }
      view.set(req.id, approval);
      await audit(js, {
        domain: 'approval',
        action: 'requested',
        actor: caller as PrincipalId,
        onBehalfOf: [approval.principal, ...approval.chain] as PrincipalId[],
        target: req.id,
        toolCall: req.id,
        ...(req.room ? { room: req.room } : {}),
        data: {
          tool: req.tool,
          action: req.action,
          approvers,
          rule: approval.rule,
          ...(req.task ? { task: req.task } : {}),
        },
      });
      await Promise.all(
        approvers.map((to) =>
          notify(
            to,
            `${caller} asks to run ${req.tool} (${req.action}) on behalf of ${approval.principal}: parley approvals approve ${req.id} --reason … (or deny) before ${approval.expiresAt}`,
            { event: 'approval_requested', ...approval },
            `approval:${req.id}:${to}`,
          ),
        ),
      );
      return approval;
    },

    async awaitApproval(req: Req<'awaitApproval'>, caller: string): Promise<Res<'awaitApproval'>> {
      const { value } = await read(req.id);
      if (value.requester !== caller && !isServiceId(caller))
        throw new ParleyError('NOT_FOUND', `no approval ${req.id}`);
      if (value.state !== 'pending') return value;
      const until = Math.min(Date.now() + req.waitMs, Date.parse(value.expiresAt));
      // Woken by the watch when the entry changes; otherwise at the wait's end or the expiry.
      await new Promise<void>((resolve) => {
        const set = waiters.get(req.id) ?? new Set();
        waiters.set(req.id, set);
        const done = () => {
          clearTimeout(timer);
          set.delete(done);
          if (set.size === 0) waiters.delete(req.id);
          resolve();
        };
        const timer = setTimeout(done, Math.max(0, until - Date.now()));
        set.add(done);
        const now = view.get(req.id);
        if (now && now.state !== 'pending') done();
      });
      return expire((await read(req.id)).value);
    },

    async listApprovals(req: Req<'listApprovals'>, caller: string): Promise<Res<'listApprovals'>> {
      const mine = [...view.values()].filter((a) => a.approvers.includes(caller) || a.requester === caller);
      const current = await Promise.all(mine.map((a) => expire(a)));
      return {
        approvals: current.filter((a) => req.state.includes(a.state)).sort((a, b) => (a.id < b.id ? 1 : -1)),
      };
    },

    async decideApproval(req: Req<'decideApproval'>, caller: string): Promise<Res<'decideApproval'>> {
      const current = await expire((await read(req.id)).value);
      if (!current.approvers.includes(caller)) {
        throw new ParleyError(
          'PERMISSION_DENIED',
          `${caller} is not an approver of ${req.id} (${current.approvers.join(', ')})`,
        );
      }
      const state = req.decision === 'approve' ? 'approved' : 'denied';
      const { value, changed } = await settle(req.id, (a) =>
        a.state === 'pending'
          ? { ...a, state, decidedBy: caller, decision: req.reason, decidedAt: new Date().toISOString() }
          : undefined,
      );
      if (!changed)
        throw new ParleyError('CONFLICT', `approval ${req.id} is already ${value.state}`, {
          details: { state: value.state },
        });
      await audit(js, {
        domain: 'approval',
        action: state,
        actor: caller as PrincipalId,
        onBehalfOf: [value.principal, ...value.chain] as PrincipalId[],
        target: req.id,
        toolCall: req.id,
        ...(value.room ? { room: value.room } : {}),
        decision: { allow: state === 'approved', reason: req.reason, decidedBy: caller },
        data: { tool: value.tool, action: value.action, requester: value.requester },
      });
      await notify(
        value.requester,
        `${caller} ${state} your call of ${value.tool}: ${req.reason}`,
        { event: 'approval_decided', ...value },
        `approval:${req.id}:decided`,
      );
      return value;
    },
  };
}
