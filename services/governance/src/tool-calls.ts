/**
 * Recording tool calls: after a call (allowed or denied) the SDK sends its digest, outcome and
 * duration; governance writes it as an audit record (domain `tool`) with the on-behalf-of chain of
 * the token it ran under, so `audit chain <tc_…>` shows who called what for whom and how it went.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import {
  type ApiParsedRequest,
  type DelegationView,
  type governanceApi,
  isParleyError,
  type PrincipalId,
  readDelegationToken,
} from '@parley/contracts';
import type { DelegationVerifier } from '@parley/kit';
import { audit } from './audit.js';
import type { Directory } from './directory.js';

type RecordRequest = ApiParsedRequest<typeof governanceApi.recordToolCall>;

/** Builds recordToolCall. */
export function createToolCalls(deps: {
  js: JetStreamClient;
  verifier: DelegationVerifier;
  directory: Directory;
}) {
  return {
    async record(req: RecordRequest, caller: string): Promise<{ recorded: true }> {
      let view: DelegationView | undefined;
      let tokenProblem: string | undefined;
      if (req.token) {
        try {
          view = await deps.verifier.verify(req.token);
        } catch (err) {
          // A token that expired or was revoked while the tool ran: the record still says under
          // which chain it ran, marked unverified.
          tokenProblem = isParleyError(err) ? err.code : 'UNAUTHENTICATED';
          try {
            view = readDelegationToken(req.token);
          } catch {
            view = undefined;
          }
        }
        if (view && view.actor !== caller) {
          tokenProblem = 'NOT_THE_ACTOR';
          view = undefined;
        }
      }
      const me = await deps.directory.participant(caller);
      const onBehalfOf = view
        ? [view.principal, ...view.chain]
        : me.kind === 'agent'
          ? [me.owner, caller]
          : [caller];
      await audit(deps.js, {
        domain: 'tool',
        action: 'call',
        actor: caller as PrincipalId,
        onBehalfOf: onBehalfOf as PrincipalId[],
        target: req.tool,
        toolCall: req.id,
        ...(req.message ? { message: req.message } : {}),
        ...(req.causedBy ? { causedBy: req.causedBy } : {}),
        data: {
          tool: req.tool,
          ...(req.action ? { action: req.action } : {}),
          argsDigest: req.argsDigest,
          status: req.status,
          ...(req.error ? { error: req.error } : {}),
          durationMs: req.durationMs,
          ...(view ? { jti: view.claims.jti } : {}),
          ...(tokenProblem ? { token: tokenProblem } : {}),
        },
      });
      return { recorded: true };
    },
  };
}
