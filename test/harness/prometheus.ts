/**
 * A strict reader of the Prometheus text exposition format (version 0.0.4), for tests: every line
 * must be a HELP, TYPE, comment or sample line, every sample must belong to a declared family of
 * the right type, histogram buckets need `le`. (No maintained parser for the format is on npm.)
 */

/** One sample line. */
export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A metric family: its TYPE, HELP and samples. */
export interface PromFamily {
  name: string;
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  help: string;
  samples: PromSample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const SUFFIXES: Record<PromFamily['type'], string[]> = {
  counter: [''],
  gauge: [''],
  untyped: [''],
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['', '_sum', '_count'],
};

// Prometheus reads values with Go's strconv.ParseFloat: NaN and Inf in any case (prom-client
// writes "Nan" for a gauge that has no value yet).
function parseValue(text: string, line: number): number {
  const lower = text.toLowerCase();
  if (lower === '+inf' || lower === 'inf') return Number.POSITIVE_INFINITY;
  if (lower === '-inf') return Number.NEGATIVE_INFINITY;
  if (lower === 'nan') return Number.NaN;
  const n = Number(text);
  if (text === '' || Number.isNaN(n)) throw new Error(`line ${line}: bad value ${JSON.stringify(text)}`);
  return n;
}

function parseLabels(text: string, line: number): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`line ${line}: label without value`);
    const name = text.slice(i, eq).trim();
    if (!LABEL.test(name)) throw new Error(`line ${line}: bad label name ${JSON.stringify(name)}`);
    if (text[eq + 1] !== '"') throw new Error(`line ${line}: label value must be quoted`);
    let value = '';
    let j = eq + 2;
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\\') {
        const next = text[++j];
        value += next === 'n' ? '\n' : next;
      } else value += text[j];
    }
    if (j >= text.length) throw new Error(`line ${line}: unterminated label value`);
    if (name in labels) throw new Error(`line ${line}: label ${name} twice`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
    else if (i < text.length) throw new Error(`line ${line}: expected , between labels`);
  }
  return labels;
}

/** Parses an exposition; throws naming the first line that is not valid. */
export function parsePrometheusText(text: string): Map<string, PromFamily> {
  const families = new Map<string, PromFamily>();
  const family = (name: string) => {
    let f = families.get(name);
    if (!f) {
      f = { name, type: 'untyped', help: '', samples: [] };
      families.set(name, f);
    }
    return f;
  };
  const typed = new Set<string>();
  text.split('\n').forEach((raw, idx) => {
    const line = idx + 1;
    if (raw.trim() === '') return;
    if (raw.startsWith('#')) {
      const m = raw.match(/^# (HELP|TYPE) (\S+) ?(.*)$/);
      if (!m) return; // a plain comment
      const [, kind, name = '', rest = ''] = m;
      if (!NAME.test(name)) throw new Error(`line ${line}: bad metric name ${name}`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`line ${line}: unknown type ${rest}`);
        if (typed.has(name)) throw new Error(`line ${line}: second TYPE for ${name}`);
        if (family(name).samples.length > 0) throw new Error(`line ${line}: TYPE after samples of ${name}`);
        typed.add(name);
        family(name).type = rest as PromFamily['type'];
      } else family(name).help = rest;
      return;
    }
    const m = raw.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$/);
    if (!m) throw new Error(`line ${line}: not a sample: ${raw}`);
    const [, name = '', , labelText = '', valueText = ''] = m;
    const labels = parseLabels(labelText, line);
    const value = parseValue(valueText, line);
    const owner = [...typed].find((f) => SUFFIXES[family(f).type].some((suffix) => `${f}${suffix}` === name));
    if (!owner) throw new Error(`line ${line}: sample ${name} belongs to no declared family`);
    const f = family(owner);
    if (f.type === 'histogram' && name.endsWith('_bucket') && !('le' in labels))
      throw new Error(`line ${line}: histogram bucket without le`);
    f.samples.push({ name, labels, value });
  });
  return families;
}

/**
 * The sum of the samples named `sample` whose labels include `labels` (0 when none match), e.g.
 * `sampleValue(m, 'parley_api_requests_total', { endpoint: 'rooms.create', code: 'OK' })`.
 */
export function sampleValue(
  families: Map<string, PromFamily>,
  sample: string,
  labels: Record<string, string> = {},
): number {
  let sum = 0;
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name !== sample) continue;
      if (Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
    }
  }
  return sum;
}
