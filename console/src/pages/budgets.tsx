/** Budgets the person may see, each limit with what was spent of it (the cost page and the admin page). */
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api';
import { nameOf } from '../state';
import { TableWrap } from './common';

interface BudgetStatus {
  budget: { kind: 'agent' | 'owner'; id: string; onExceed: string };
  limits: { limit: string; value: number; used: number; ratio: number; period: string }[];
  exceeded: boolean;
}

const LIMIT_LABEL: Record<string, string> = {
  tokensPerDay: 'tokens per day',
  tokensPerMonth: 'tokens per month',
  costUsdPerDay: 'USD per day',
  costUsdPerMonth: 'USD per month',
};

/** Each budget's limits: used / limit as a progress bar, and the figures in a data table. */
export function Budgets({ version }: { version: number }) {
  const [list, setList] = useState<BudgetStatus[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ budgets: BudgetStatus[] }>('/v1/budgets')
      .then((r) => {
        setList(r.budgets);
        setError(null);
      })
      .catch((e: Error & { code?: string }) => setError(`${e.code ?? 'ERROR'}: ${e.message}`));
  }, [version]);
  const fmt = (limit: string, v: number) => (limit.startsWith('cost') ? v.toFixed(2) : String(v));
  return (
    <section aria-labelledby="budgets-h" class="budgets">
      <h2 id="budgets-h">Budgets</h2>
      {error ? (
        <p class="section-error" role="alert">
          {error}
        </p>
      ) : null}
      {list && list.length === 0 ? <p>No budget you may see is set.</p> : null}
      {list?.length ? (
        <TableWrap label={`Budgets and what was spent of them`}>
          <table data-testid="budgets">
            <caption class="sr-only">Budgets and what was spent of them</caption>
            <thead>
              <tr>
                <th scope="col">Budget of</th>
                <th scope="col">Limit</th>
                <th scope="col">Period (UTC)</th>
                <th scope="col">Used</th>
                <th scope="col">Limit value</th>
                <th scope="col">Progress</th>
              </tr>
            </thead>
            <tbody>
              {list.flatMap((b) =>
                b.limits.map((l) => {
                  const label = `${nameOf(b.budget.id)} ${LIMIT_LABEL[l.limit] ?? l.limit}`;
                  return (
                    <tr key={`${b.budget.kind}.${b.budget.id}.${l.limit}`} data-budget={b.budget.id}>
                      <th scope="row">
                        {nameOf(b.budget.id)} <span class="muted">({b.budget.kind})</span>
                      </th>
                      <td>{LIMIT_LABEL[l.limit] ?? l.limit}</td>
                      <td>{l.period}</td>
                      <td>{fmt(l.limit, l.used)}</td>
                      <td>{fmt(l.limit, l.value)}</td>
                      <td>
                        <progress max={1} value={Math.min(l.ratio, 1)} aria-label={label} />{' '}
                        <span class={l.ratio > 1 ? 'over' : ''} data-testid="budget-percent">
                          {Math.round(l.ratio * 100)}%{l.ratio > 1 ? ' — exceeded' : ''}
                        </span>
                      </td>
                    </tr>
                  );
                }),
              )}
            </tbody>
          </table>
        </TableWrap>
      ) : null}
    </section>
  );
}
