// Loaded into every test file's process by scripts/run-tests.mjs (--import). A file whose tests have
// ended but whose process stays alive (something it opened was never closed, or an `after` hook
// hangs) would otherwise be cut off only by the runner's 300 s limit, saying nothing: this fails it
// LINGER_MS after its tests ended, naming what is still open.
// NODE_OPTIONS reaches every process a test starts too (services, bridges, npm start): only a test
// file's own process, started by the runner with the file as its script, is watched.
import { execFileSync } from 'node:child_process';

const isTestFile =
  process.env.NODE_TEST_CONTEXT !== undefined && /\.test\.[cm]?[jt]s$/.test(process.argv[1] ?? '');

/** Longer than any clean-up takes (a service process gets 40 s, a backbone 30 s). */
const LINGER_MS = Number(process.env.PARLEY_TEST_LINGER_MS ?? 120_000);

/** Who listens on a local port, from `ss` (empty when nobody does, or `ss` is missing). */
function listener(port) {
  try {
    return execFileSync('ss', ['-Htlnp', `sport = :${port}`], { encoding: 'utf8', timeout: 5_000 })
      .trim()
      .replace(/\s+/g, ' ');
  } catch {
    return '';
  }
}

/** What keeps the process alive, in words: sockets by address, child processes by command. */
function openHandles() {
  const stdio = [process.stdin, process.stdout, process.stderr];
  const handles = process._getActiveHandles().filter((h) => !stdio.includes(h));
  const described = handles.map((h) => {
    if (h?.constructor?.name === 'Socket' && h.remotePort)
      // Whose port it is: a socket to a port another file's server took over reads differently from
      // one to this file's own server.
      return `a TCP socket from :${h.localPort} to ${h.remoteAddress}:${h.remotePort} (listening there: ${listener(h.remotePort) || 'nobody'})`;
    if (h?.constructor?.name === 'Server' && h.address?.())
      return `a server listening on port ${h.address().port}`;
    if (h?.constructor?.name === 'ChildProcess') return `child process ${h.pid}: ${h.spawnargs?.join(' ')}`;
    return h?.constructor?.name ?? typeof h;
  });
  const counts = new Map();
  for (const d of [...described, ...process.getActiveResourcesInfo().filter((r) => r === 'Timeout')])
    counts.set(d, (counts.get(d) ?? 0) + 1);
  return [...counts].map(([d, n]) => (n > 1 ? `${n} × ${d}` : d));
}

// The first `after` of the file's root: it runs before the file's own, so the bound includes them.
if (isTestFile)
  (await import('node:test')).after(() => {
    setTimeout(() => {
      process.stderr.write(
        `\nthis test file's process is still running ${LINGER_MS / 1000} s after its tests ended (an after hook that hangs, or something never closed). Open:\n  ${openHandles().join('\n  ')}\n`,
      );
      process.exit(1);
    }, LINGER_MS).unref();
  });
