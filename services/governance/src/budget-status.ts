/**
 * Reading budgets (`governance.budgets`): each budget the caller may see with what was spent of
 * every limit in the current UTC day and month — the same running totals (`total.<day|month>.…` in
 * `parley_usage`) the budgets are enforced against, so "how close" here is what enforcement sees.
 *
 * Who sees a budget is who may set it, plus the one it caps: an agent's budget its owner and the
 * admins of its org; an owner's budget that person and the admins of their org; the superadmin and
 * services all of them.
 */
import type { KV } from '@nats-io/kv';
import {
  type ApiParsedRequest,
  type ApiResponse,
  type Budget,
  type BudgetLimitStatus,
  type governanceApi,
  isServiceId,
} from '@parley/contracts';
import type { Directory } from './directory.js';
import type { PolicyStore } from './policy-store.js';

interface Totals {
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
}

/** Builds the budgets read. */
export function createBudgetStatus(deps: { kv: KV; store: PolicyStore; directory: Directory }) {
  async function totals(period: 'day' | 'month', date: string, kind: string, id: string): Promise<Totals> {
    const e = await deps.kv.get(`total.${period}.${date}.${kind}.${id}`);
    if (e?.operation !== 'PUT' || e.length === 0) return { inputTokens: 0, outputTokens: 0, costMicros: 0 };
    return e.json<Totals>();
  }

  /** Whether `caller` may see `budget`. */
  async function visible(caller: string, budget: Budget): Promise<boolean> {
    if (isServiceId(caller)) return true;
    const me = await deps.directory.human(caller);
    if (me.superadmin) return true;
    const target = await deps.directory.find(budget.id);
    if (!target) return false;
    if (budget.kind === 'owner' ? target.id === caller : target.kind === 'agent' && target.owner === caller)
      return true;
    return me.role === 'admin' && target.org === me.org;
  }

  async function status(budget: Budget, now: Date) {
    const day = now.toISOString().slice(0, 10);
    const month = now.toISOString().slice(0, 7);
    const [d, m] = await Promise.all([
      totals('day', day, budget.kind, budget.id),
      totals('month', month, budget.kind, budget.id),
    ]);
    const tokens = (t: Totals) => t.inputTokens + t.outputTokens;
    const limits: BudgetLimitStatus[] = [];
    const add = (
      limit: BudgetLimitStatus['limit'],
      value: number | undefined,
      used: number,
      period: string,
    ) => {
      if (value !== undefined) limits.push({ limit, value, used, ratio: used / value, period });
    };
    add('tokensPerDay', budget.tokensPerDay, tokens(d), day);
    add('tokensPerMonth', budget.tokensPerMonth, tokens(m), month);
    add('costUsdPerDay', budget.costUsdPerDay, d.costMicros / 1e6, day);
    add('costUsdPerMonth', budget.costUsdPerMonth, m.costMicros / 1e6, month);
    // Enforcement suspends once a total is over a limit (strictly), so "exceeded" says the same.
    return { budget, limits, exceeded: limits.some((l) => l.used > l.value) };
  }

  return {
    async budgets(
      req: ApiParsedRequest<typeof governanceApi.budgets>,
      caller: string,
    ): Promise<ApiResponse<typeof governanceApi.budgets>> {
      const now = new Date();
      const out: ApiResponse<typeof governanceApi.budgets>['budgets'] = [];
      const all = deps.store
        .allBudgets()
        .sort((a, b) => `${a.kind}${a.id}`.localeCompare(`${b.kind}${b.id}`));
      for (const b of all) {
        if (req.agent && !(b.kind === 'agent' && b.id === req.agent)) continue;
        if (req.owner && (b.kind === 'owner' ? b.id : await ownerOf(b.id)) !== req.owner) continue;
        if (!(await visible(caller, b))) continue;
        out.push(await status(b, now));
      }
      return { budgets: out };
    },
  };

  async function ownerOf(agent: string): Promise<string | undefined> {
    const f = await deps.directory.find(agent);
    return f?.kind === 'agent' ? f.owner : undefined;
  }
}
