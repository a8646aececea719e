/**
 * OAuth 2.0 client credentials against a Salesforce org (`POST {loginUrl}/services/oauth2/token`),
 * and the gRPC metadata every Pub/Sub API call carries: `accesstoken`, `instanceurl`, `tenantid`.
 * The org id (tenant) comes from the token response's identity URL
 * (`…/id/<orgId>/<userId>`) unless configured.
 */
import * as grpc from '@grpc/grpc-js';
import * as z from 'zod';

const TokenResponse = z.object({
  access_token: z.string().min(1),
  instance_url: z.string().url(),
  id: z.string().optional(),
  token_type: z.string().optional(),
});

/** Options of {@link SalesforceAuth}. */
export interface SalesforceAuthOptions {
  /** e.g. https://MyDomain.my.salesforce.com (client credentials need the My Domain URL). */
  loginUrl: string;
  clientId: string;
  clientSecret: string;
  /** The org id; read from the token response when absent. */
  tenantId?: string | undefined;
}

/** A token source that fetches once and again after {@link SalesforceAuth.invalidate}. */
export class SalesforceAuth {
  readonly #o: SalesforceAuthOptions;
  #current: Promise<{ token: string; instanceUrl: string; tenantId: string }> | undefined;

  constructor(o: SalesforceAuthOptions) {
    this.#o = o;
  }

  /** Forgets the token (after UNAUTHENTICATED: it expired or was revoked). */
  invalidate(): void {
    this.#current = undefined;
  }

  /** The instance URL of the org (after the first token). */
  async instanceUrl(): Promise<string> {
    return (await this.#token()).instanceUrl;
  }

  /** Metadata for one RPC. */
  async metadata(): Promise<grpc.Metadata> {
    const t = await this.#token();
    const md = new grpc.Metadata();
    md.set('accesstoken', t.token);
    md.set('instanceurl', t.instanceUrl);
    md.set('tenantid', t.tenantId);
    return md;
  }

  #token() {
    this.#current ??= this.#fetch().catch((err) => {
      this.#current = undefined;
      throw err;
    });
    return this.#current;
  }

  async #fetch() {
    const res = await fetch(new URL('/services/oauth2/token', this.#o.loginUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: this.#o.clientId,
        client_secret: this.#o.clientSecret,
      }),
      signal: AbortSignal.timeout(15_000),
    });
    const body = await res.json().catch(() => undefined);
    if (!res.ok) {
      const err = (body as { error?: string; error_description?: string } | undefined) ?? {};
      throw new Error(
        `salesforce token endpoint: ${res.status} ${err.error ?? ''} ${err.error_description ?? ''}`.trim(),
      );
    }
    const t = TokenResponse.parse(body);
    const tenantId = this.#o.tenantId ?? t.id?.match(/\/id\/([^/]+)\//)?.[1];
    if (!tenantId) throw new Error('salesforce token response names no org id; set SALESFORCE_TENANT_ID');
    return { token: t.access_token, instanceUrl: t.instance_url, tenantId };
  }
}
