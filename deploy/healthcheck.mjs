// The image's HEALTHCHECK: 0 when the service's /healthz answers 200 (HTTP_PORT, default 8080).
const port = process.env.HTTP_PORT || '8080';
try {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2500) });
  process.exit(res.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
