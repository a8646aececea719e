/** Cost: usage and cost by agent, room and day as charts (Chart.js), over the last 30 days; budgets and how close each is; a budget form for one's agents. */
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Legend,
  LinearScale,
  LineController,
  LineElement,
  PointElement,
  Tooltip,
} from 'chart.js';
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, type UsageRow } from '../api';
import { myAgents, nameOf, rooms } from '../state';
import { Budgets } from './budgets';
import { act } from './common';

Chart.register(
  BarController,
  BarElement,
  LineController,
  LineElement,
  PointElement,
  CategoryScale,
  LinearScale,
  Legend,
  Tooltip,
);

interface Usage {
  by: string;
  since: string;
  until: string;
  rows: UsageRow[];
  total: UsageRow;
}

const day = (d: Date) => d.toISOString().slice(0, 10);

function UsageChart({ by, label }: { by: 'agent' | 'room' | 'day'; label: string }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const since = day(new Date(Date.now() - 29 * 86_400_000));
    api<Usage>(`/v1/usage?by=${by}&since=${since}&until=${day(new Date())}`)
      .then(setUsage)
      .catch((e: Error) => setError(e.message));
  }, [by]);
  useEffect(() => {
    if (!usage || !canvas.current) return;
    // Every day of the range, zero where nothing was reported, so the line shows the trend.
    const rows =
      by === 'day'
        ? Array.from({ length: 30 }, (_, i) => {
            const key = day(new Date(Date.parse(usage.since) + i * 86_400_000));
            return (
              usage.rows.find((r) => r.key === key) ?? {
                key,
                inputTokens: 0,
                outputTokens: 0,
                costUsd: 0,
                reports: 0,
              }
            );
          }).filter((r) => r.key <= usage.until)
        : usage.rows;
    const name = (k: string) =>
      by === 'agent'
        ? (myAgents.value.find((a) => a.agent.id === k)?.agent.card.name ?? k)
        : by === 'room'
          ? (rooms.value.find((r) => r.id === k)?.title ?? k)
          : k;
    const chart = new Chart(canvas.current, {
      type: by === 'day' ? 'line' : 'bar',
      data: {
        labels: rows.map((r) => (by === 'day' ? r.key.slice(5) : name(r.key))),
        datasets: [
          {
            label: 'cost (USD)',
            data: rows.map((r) => r.costUsd),
            yAxisID: 'cost',
            backgroundColor: '#2f6fde',
            borderColor: '#2f6fde',
          },
          {
            label: 'tokens (in + out)',
            data: rows.map((r) => r.inputTokens + r.outputTokens),
            yAxisID: 'tokens',
            backgroundColor: '#9aa9c2',
            borderColor: '#9aa9c2',
          },
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: {
          cost: { type: 'linear', position: 'left', beginAtZero: true },
          tokens: { type: 'linear', position: 'right', beginAtZero: true, grid: { drawOnChartArea: false } },
        },
      },
    });
    return () => chart.destroy();
  }, [usage]);
  const summary = usage
    ? `${usage.rows.length} rows from ${usage.since} to ${usage.until}; total ${usage.total.costUsd.toFixed(2)} USD, ${usage.total.inputTokens + usage.total.outputTokens} tokens`
    : 'loading';
  return (
    <section class="chart" aria-labelledby={`chart-${by}`}>
      <h2 id={`chart-${by}`}>{label}</h2>
      {error ? <p role="alert">{error}</p> : null}
      <div class="chart-box">
        <canvas ref={canvas} role="img" aria-label={`${label}: ${summary}`} />
      </div>
      {usage ? (
        <table>
          <caption class="sr-only">{label}</caption>
          <thead>
            <tr>
              <th scope="col">{by}</th>
              <th scope="col">Input tokens</th>
              <th scope="col">Output tokens</th>
              <th scope="col">Cost (USD)</th>
            </tr>
          </thead>
          <tbody>
            {usage.rows.map((r) => (
              <tr key={r.key}>
                <td>
                  {by === 'room'
                    ? (rooms.value.find((x) => x.id === r.key)?.title ?? r.key)
                    : by === 'agent'
                      ? nameOf(r.key)
                      : r.key}
                </td>
                <td>{r.inputTokens}</td>
                <td>{r.outputTokens}</td>
                <td>{r.costUsd.toFixed(4)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

function BudgetForm({ onSet }: { onSet: () => void }) {
  const [agent, setAgent] = useState('');
  const [cost, setCost] = useState('');
  const [tokens, setTokens] = useState('');
  return (
    <form
      class="inline"
      onSubmit={(e) => {
        e.preventDefault();
        void act(
          () =>
            api('/v1/budgets', {
              method: 'PUT',
              body: {
                agent,
                ...(cost ? { costUsdPerDay: Number(cost) } : {}),
                ...(tokens ? { tokensPerDay: Number(tokens) } : {}),
              },
            }),
          'Budget set',
        ).then((ok) => {
          if (ok) onSet();
        });
      }}
    >
      <h2>Set a daily budget</h2>
      <label for="budget-agent">Agent</label>
      <select id="budget-agent" value={agent} onChange={(e) => setAgent(e.currentTarget.value)} required>
        <option value="">choose…</option>
        {myAgents.value.map((a) => (
          <option key={a.agent.id} value={a.agent.id}>
            {a.agent.card.name}
          </option>
        ))}
      </select>
      <label for="budget-cost">USD per day</label>
      <input
        id="budget-cost"
        inputMode="decimal"
        value={cost}
        onInput={(e) => setCost(e.currentTarget.value)}
      />
      <label for="budget-tokens">Tokens per day</label>
      <input
        id="budget-tokens"
        inputMode="numeric"
        value={tokens}
        onInput={(e) => setTokens(e.currentTarget.value)}
      />
      <button type="submit">Set budget</button>
    </form>
  );
}

/** `/cost`. */
export function CostPage() {
  const [version, setVersion] = useState(0);
  return (
    <div class="page">
      <h1>Cost (last 30 days)</h1>
      <div class="charts">
        <UsageChart by="day" label="By day" />
        <UsageChart by="agent" label="By agent" />
        <UsageChart by="room" label="By room" />
      </div>
      <Budgets version={version} />
      <BudgetForm onSet={() => setVersion((v) => v + 1)} />
    </div>
  );
}
