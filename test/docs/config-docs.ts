// Renders docs/configuration.md — every environment variable each process reads — from the zod
// config schemas, so the tables cannot drift from the code (a test compares; `pnpm generate` writes).
import { ConsentEnv } from '@parley/consent';
import { GovernanceEnv } from '@parley/governance';
import { InitEnv } from '@parley/init';
import { commonEnv, telemetryEnv } from '@parley/kit';
import { McpEnv } from '@parley/mcp';
import { RegistryEnv } from '@parley/registry';
import { RoomsEnv } from '@parley/rooms';
import { StandaloneEnv } from '@parley/standalone';
import type * as z from 'zod';

/** Where the generated page lives, relative to the repository root. */
export const CONFIG_DOCS_PATH = 'docs/configuration.md';

type Shape = Record<string, z.ZodType>;

interface Section {
  readonly title: string;
  readonly intro: string;
  readonly shape: Shape;
  /** Variables documented in an earlier section and not repeated here. */
  readonly omit?: Shape;
}

const telemetryOnly: Shape = telemetryEnv;
const common: Shape = Object.fromEntries(Object.entries(commonEnv).filter(([k]) => !(k in telemetryEnv)));

const sections: Section[] = [
  {
    title: 'Every service',
    intro: 'Read by each service process (rooms, registry, consent, governance, mcp).',
    shape: common,
  },
  {
    title: 'Telemetry (OpenTelemetry)',
    intro:
      'Read by every service and by `npm start`; see [operations](operations.md#telemetry-traces-logs-and-metrics).',
    shape: telemetryOnly,
  },
  {
    title: 'rooms',
    intro: 'The rooms service: control plane, ingress and fan-out.',
    shape: RoomsEnv.shape,
    omit: commonEnv,
  },
  { title: 'registry', intro: 'The registry service.', shape: RegistryEnv.shape, omit: commonEnv },
  { title: 'consent', intro: 'The consent service.', shape: ConsentEnv.shape, omit: commonEnv },
  { title: 'governance', intro: 'The governance service.', shape: GovernanceEnv.shape, omit: commonEnv },
  { title: 'mcp', intro: 'The MCP bridge’s service side.', shape: McpEnv.shape, omit: commonEnv },
  {
    title: 'npm start (standalone)',
    intro:
      'The local backbone; flags (`--nats-port`, `--http-port`, `--home`, `--no-demo`) win over these. It also reads the send-guard variables of rooms.',
    shape: StandaloneEnv.shape,
    omit: telemetryEnv,
  },
  {
    title: 'parley-init',
    intro: 'The one-shot init step (`parley-init keys`, `parley-init backbone`).',
    shape: InitEnv.shape,
  },
];

const DEFAULT_TAG = /\s*@default\s+(.*)$/s;

function describe(schema: z.ZodType): { meaning: string; fallback: string } {
  const text = schema.description ?? '';
  const m = DEFAULT_TAG.exec(text);
  return m
    ? { meaning: text.slice(0, m.index).trim(), fallback: (m[1] ?? '').trim() }
    : { meaning: text.trim(), fallback: '' };
}

function defaultOf(schema: z.ZodType): string {
  const { fallback } = describe(schema);
  if (fallback) return fallback;
  const def = (schema as { def?: { type?: string; defaultValue?: unknown } }).def;
  if (def?.type === 'default') return String(def.defaultValue);
  return schema.safeParse(undefined).success ? '–' : 'required';
}

// Markdown table cells: no pipes or line breaks, and `<name>` placeholders outside code spans shown
// rather than read as HTML (inside a code span an entity would show literally).
const cell = (s: string) =>
  s
    .replaceAll('|', '\\|')
    .replaceAll('\n', ' ')
    .split('`')
    .map((part, i) => (i % 2 === 1 ? part : part.replaceAll('<', '&lt;').replaceAll('>', '&gt;')))
    .join('`');

function table(section: Section): string {
  const rows = Object.entries(section.shape)
    .filter(([name]) => !(section.omit && name in section.omit))
    .map(
      ([name, schema]) => `| \`${name}\` | ${cell(defaultOf(schema))} | ${cell(describe(schema).meaning)} |`,
    );
  return [
    `## ${section.title}`,
    '',
    section.intro,
    '',
    '| variable | default | meaning |',
    '| --- | --- | --- |',
    ...rows,
  ].join('\n');
}

/** The page, unformatted (the test and the writer both run it through Biome's formatter). */
export function renderConfigDocs(): string {
  return [
    '# Configuration',
    '',
    '<!-- Generated from the config schemas (services/*/src/config.ts) by `pnpm generate`; do not edit. -->',
    '',
    'Every variable is validated at start; an invalid value stops the process with a list of every problem, and an empty string counts as unset.',
    '',
    ...sections.map(table).flatMap((t) => [t, '']),
  ].join('\n');
}
