/**
 * OAuth 2.0 client credentials (RFC 6749 §4.4) for the APIs bridges call: S/4HANA OData behind
 * XSUAA, Databricks service principals. The token is cached until shortly before `expires_in`
 * and fetched again after {@link ClientCredentials.invalidate} (a 401).
 */
import * as z from 'zod';

const TokenResponse = z.object({
  access_token: z.string().min(1),
  expires_in: z.coerce.number().optional(),
  token_type: z.string().optional(),
});

/** Options of {@link ClientCredentials}. */
export interface ClientCredentialsOptions {
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  scope?: string;
}

/** A cached client-credentials token. */
export class ClientCredentials {
  readonly #o: ClientCredentialsOptions;
  #current: { token: string; until: number } | undefined;

  constructor(o: ClientCredentialsOptions) {
    this.#o = o;
  }

  /** Forgets the token. */
  invalidate(): void {
    this.#current = undefined;
  }

  /** A valid access token. */
  async token(): Promise<string> {
    if (this.#current && this.#current.until > Date.now()) return this.#current.token;
    const res = await fetch(this.#o.tokenUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        accept: 'application/json',
        authorization: `Basic ${Buffer.from(`${encodeURIComponent(this.#o.clientId)}:${encodeURIComponent(this.#o.clientSecret)}`).toString('base64')}`,
      },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        ...(this.#o.scope ? { scope: this.#o.scope } : {}),
      }),
      signal: AbortSignal.timeout(15_000),
    });
    if (!res.ok)
      throw new Error(
        `token endpoint ${this.#o.tokenUrl}: ${res.status} ${(await res.text()).slice(0, 200)}`,
      );
    const t = TokenResponse.parse(await res.json());
    // Renew a minute early (or at half the lifetime for short-lived tokens).
    const life = (t.expires_in ?? 300) * 1000;
    this.#current = { token: t.access_token, until: Date.now() + Math.max(life / 2, life - 60_000) };
    return t.access_token;
  }
}
