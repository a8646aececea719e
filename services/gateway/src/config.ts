import { commonEnv, envBoolean, loadEnv } from '@parley/kit';
import * as z from 'zod';

const list = z.string().default('');

/** The gateway's environment. */
export const GatewayEnv = z.object({
  ...commonEnv,
  PARLEY_GATEWAY_PUBLIC_URL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe(
      'The URL clients reach the gateway at (login links, hook URLs, OpenAPI servers). @default http://<HTTP_HOST>:<HTTP_PORT>',
    ),
  PARLEY_OIDC_ISSUER: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe(
      'OIDC issuer whose ID/access tokens (JWTs) sign people in; its /.well-known/openid-configuration names the JWKS. Unset: no OIDC sign-in.',
    ),
  PARLEY_OIDC_AUDIENCE: z
    .string()
    .optional()
    .describe('The audience (`aud`) tokens must carry: the client id registered at the issuer.'),
  PARLEY_OIDC_CLOCK_SKEW_S: z.coerce
    .number()
    .int()
    .min(0)
    .max(300)
    .default(60)
    .describe('Clock skew tolerated on exp/nbf/iat, in seconds (at most 300). @default 60'),
  PARLEY_OIDC_JWKS_COOLDOWN_S: z.coerce
    .number()
    .int()
    .min(0)
    .max(3600)
    .default(30)
    .describe(
      'Least time between two JWKS fetches when a token names an unknown key id (key rotation); bounds what random key ids can make the gateway fetch. @default 30',
    ),
  PARLEY_OIDC_JIT_DOMAINS: list.describe(
    'Comma-separated email domains whose verified users are created on first sign-in (in PARLEY_OIDC_JIT_ORG). @default none: only existing users sign in',
  ),
  PARLEY_OIDC_JIT_ORG: z
    .string()
    .regex(/^org_[0-9A-Z]{26}$/)
    .optional()
    .describe('The org just-in-time users are created in.'),
  PARLEY_GATEWAY_MAX_BODY_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(1024 * 1024)
    .default(256 * 1024)
    .describe(
      'Largest request body; larger is refused with 413 before anything is read further. @default 262144',
    ),
  PARLEY_GATEWAY_POOL_SIZE: z.coerce
    .number()
    .int()
    .min(1)
    .max(100_000)
    .default(1000)
    .describe(
      'Most principals with an open NATS connection at once (least recently used closed first). @default 1000',
    ),
  PARLEY_GATEWAY_CREDS_TTL_S: z.coerce
    .number()
    .int()
    .min(60)
    .max(3600)
    .default(900)
    .describe('Lifetime of the short-lived NATS credentials minted per principal, in seconds. @default 900'),
  PARLEY_WEBHOOK_ALLOW_PRIVATE: list.describe(
    'Comma-separated hosts or IP addresses outbound webhooks may reach although they are private or loopback (SSRF protection refuses them otherwise), e.g. 127.0.0.1. @default none',
  ),
  PARLEY_WEBHOOK_BACKOFF_MS: z.coerce
    .number()
    .int()
    .min(1)
    .max(60_000)
    .default(1000)
    .describe(
      'First retry delay of an outbound webhook delivery; doubles per try, at most 60 s. @default 1000',
    ),
  PARLEY_CONSOLE_DIR: z
    .string()
    .optional()
    .describe(
      'Directory of the built console (served at /). @default console/dist of this checkout; absent: / says how to build it',
    ),
  PARLEY_JAEGER_URL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe('Jaeger UI the console links traces to (…/trace/<id>). Unset: no trace links.'),
  PARLEY_GATEWAY_SECURE_COOKIES: envBoolean
    .default(false)
    .describe('Mark the session cookie Secure (behind TLS). @default false'),
  PARLEY_A2A_OUTBOUND: envBoolean
    .default(true)
    .describe(
      'Run the proxies of imported A2A agents (outbound A2A calls) on this replica; false leaves them to replicas that may reach the vendors. @default true',
    ),
});

/** The gateway's configuration. */
export type GatewayConfig = z.output<typeof GatewayEnv>;

/** Reads and validates the gateway's configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): GatewayConfig {
  return loadEnv('gateway', GatewayEnv, env);
}

/** The configuration with defaults, for in-process use (standalone, tests). */
export function defaultConfig(overrides: Partial<Record<keyof GatewayConfig, string>> = {}): GatewayConfig {
  return loadConfig(overrides);
}
