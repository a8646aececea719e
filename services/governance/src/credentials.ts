/**
 * Participant credentials: issue, rotate, revoke. What was issued to whom, and every revoked user
 * key, lives in `parley_policy` (`creds.<id>`, `revoked.<userKey>`, `participant.<id>`); the NATS
 * server learns of revocations through a pushed account JWT (full resolver, `$SYS.REQ.CLAIMS.UPDATE`),
 * which closes the live connections of the revoked keys and refuses them from then on.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  CredentialRecord,
  type IssuedCredentials,
  ParleyError,
  type ParticipantPolicy,
  type PrincipalId,
  policyKeys,
  RevokedUserKey,
  readStanding,
} from '@parley/contracts';
import { type AccountSigner, type MintedCreds, sameAccountClaims, signAccountJwt } from '@parley/keys';
import { appendAudit, type Logger, publishEvent, snapshotKv, updateKv } from '@parley/kit';

/** How governance pushes account JWT updates to the NATS server. */
export interface AccountUpdates {
  /** Re-signs the account JWT. */
  signer: AccountSigner;
  /** A connection as the system account's user (may publish `$SYS.REQ.CLAIMS.UPDATE`). */
  systemNc: NatsConnection;
}

/** The PARLEY account JWT the server holds (full resolver), or undefined when it does not say. */
async function heldAccountJwt(updates: AccountUpdates): Promise<string | undefined> {
  try {
    const subject = `$SYS.REQ.ACCOUNT.${updates.signer.accountPublicKey}.CLAIMS.LOOKUP`;
    const msg = await updates.systemNc.request(subject, undefined, { timeout: 1000 });
    return msg.string() || undefined;
  } catch {
    return undefined;
  }
}

/** What {@link createCredentials} needs. */
export interface CredentialsDeps {
  policy: KV;
  js: JetStreamClient;
  log: Logger;
  /** Mints a participant's creds with the scoped key (`expiresAt`: a short-lived session's). */
  mint(participantId: string, options?: { expiresAt?: Date }): Promise<MintedCreds>;
  /** Absent: revocations are recorded (and enforced by the ingress) but not pushed to NATS. */
  accountUpdates?: AccountUpdates | undefined;
}

const dec = new TextDecoder();

/** Issue, rotate and revoke participant credentials. */
export function createCredentials(deps: CredentialsDeps) {
  const { policy, js, log } = deps;

  async function statusOf(participant: string): Promise<ParticipantPolicy | undefined> {
    const e = await policy.get(policyKeys.participant(participant));
    // The same reading as every other service: a malformed record is suspended, never active.
    return e?.operation === 'PUT' && e.length > 0 ? readStanding(e.value).standing : undefined;
  }

  async function refuseRevoked(participant: string): Promise<void> {
    const status = await statusOf(participant);
    if (status?.status === 'revoked') {
      throw new ParleyError(
        'REVOKED',
        `${participant} was revoked (${status.reason}); it gets no credentials`,
      );
    }
  }

  /** Changes `creds.<id>` with compare-and-set, retrying when another writer got there first. */
  async function updateRecord(
    participant: string,
    change: (r: CredentialRecord) => CredentialRecord,
  ): Promise<CredentialRecord> {
    const r = await updateKv<CredentialRecord>(
      policy,
      policyKeys.creds(participant),
      (current) => change(current ?? { participant, keys: [] }),
      { schema: CredentialRecord, what: `the credentials of ${participant}` },
    );
    return r.value as CredentialRecord;
  }

  /** Marks every live key of `participant` revoked; returns their public keys. */
  async function revokeKeys(
    participant: string,
    reason: 'rotated' | 'revoked',
    keep?: MintedCreds,
  ): Promise<string[]> {
    const now = new Date();
    let revoked: string[] = [];
    await updateRecord(participant, (r) => {
      revoked = [];
      for (const k of r.keys) {
        if (k.revokedAt || k.userPublicKey === keep?.userPublicKey) continue;
        // An expired session key cannot connect any more: nothing to revoke.
        if (k.expiresAt && Date.parse(k.expiresAt) <= now.getTime()) continue;
        k.revokedAt = now.toISOString();
        revoked.push(k.userPublicKey);
      }
      if (keep) r.keys.push({ userPublicKey: keep.userPublicKey, issuedAt: now.toISOString() });
      return r;
    });
    const at = Math.floor(now.getTime() / 1000);
    for (const userKey of revoked) {
      await policy.put(
        policyKeys.revokedUser(userKey),
        JSON.stringify(RevokedUserKey.parse({ participant, at, reason })),
      );
    }
    return revoked;
  }

  // One push at a time from this process; see pushRevocations.
  let pushing: Promise<unknown> = Promise.resolve();

  /**
   * Pushes an account JWT carrying every revoked key to the NATS server. A push replaces the
   * server's revocations wholesale (the server accepts an older JWT too), so two replicas pushing at
   * once could leave out each other's keys: after each push the set is read again and pushed again
   * until it did not change, so the last push always carries every revocation written before it.
   */
  function pushRevocations(): Promise<number> {
    const run = pushing.then(async () => {
      const updates = deps.accountUpdates;
      if (!updates) return 0;
      let last: string | undefined;
      for (let round = 0; round < 20; round++) {
        const entries = await snapshotKv(policy, policyKeys.revokedUser('>'));
        const revocations: Record<string, number> = {};
        for (const e of entries.values()) {
          revocations[e.key.slice(policyKeys.revokedUser('').length)] = RevokedUserKey.parse(e.json()).at;
        }
        const fingerprint = JSON.stringify(Object.entries(revocations).sort());
        if (fingerprint === last) return Object.keys(revocations).length;
        const jwt = await signAccountJwt(updates.signer, revocations);
        // Nothing to push when the server holds these claims already (a start after a clean stop, a
        // second replica): nats-server 2.9.10 answers the account's JetStream requests "no
        // responders" for a moment while it applies a push, and every start of governance pushed.
        const held = await heldAccountJwt(updates);
        if (held !== undefined && sameAccountClaims(held, jwt)) {
          last = fingerprint;
          continue;
        }
        let reply: { data?: { code?: number }; error?: { code?: number; description?: string } };
        try {
          const msg = await updates.systemNc.request('$SYS.REQ.CLAIMS.UPDATE', jwt, { timeout: 5000 });
          reply = JSON.parse(dec.decode(msg.data));
        } catch (err) {
          throw new ParleyError('UNAVAILABLE', 'the NATS server did not take the account update', {
            cause: err,
            retryAfterMs: 1000,
          });
        }
        if (reply.error || (reply.data?.code ?? 200) >= 300) {
          log.error({ reply }, 'account JWT update refused');
          throw new ParleyError('INTERNAL', 'the NATS server refused the account update');
        }
        log.info({ revocations: Object.keys(revocations).length }, 'account revocations pushed');
        last = fingerprint;
      }
      throw new ParleyError('UNAVAILABLE', 'revocations kept changing while being pushed; retry');
    });
    pushing = run.catch(() => undefined);
    return run;
  }

  async function audit(action: string, actor: PrincipalId, target: string, data: Record<string, unknown>) {
    await appendAudit(js, { domain: 'credentials', action, actor, target, data });
  }

  return {
    pushRevocations,

    /** Mints credentials for a participant (refused for a revoked one). */
    async issue(participant: string, actor: PrincipalId): Promise<IssuedCredentials> {
      await refuseRevoked(participant);
      const minted = await deps.mint(participant);
      await updateRecord(participant, (r) => {
        r.keys.push({ userPublicKey: minted.userPublicKey, issuedAt: new Date().toISOString() });
        return r;
      });
      await audit('issue', actor, participant, { userPublicKey: minted.userPublicKey });
      log.info({ participant, user: minted.userPublicKey }, 'credentials issued');
      return { creds: minted.creds, userPublicKey: minted.userPublicKey };
    },

    /**
     * Short-lived credentials for the gateway to act as a participant it authenticated. The key is
     * recorded (so revoking the participant revokes it too); expired session keys are dropped from
     * the record as new ones are added, so the record stays small.
     */
    async session(
      participant: string,
      actor: PrincipalId,
      ttlSeconds: number,
    ): Promise<{ creds: string; userPublicKey: string; expiresAt: string }> {
      await refuseRevoked(participant);
      const expiresAt = new Date(Date.now() + ttlSeconds * 1000);
      const minted = await deps.mint(participant, { expiresAt });
      await updateRecord(participant, (r) => {
        const now = Date.now();
        r.keys = r.keys.filter((k) => !k.expiresAt || Date.parse(k.expiresAt) > now);
        r.keys.push({
          userPublicKey: minted.userPublicKey,
          issuedAt: new Date().toISOString(),
          expiresAt: expiresAt.toISOString(),
        });
        return r;
      });
      log.debug({ participant, actor, user: minted.userPublicKey }, 'session credentials issued');
      return { creds: minted.creds, userPublicKey: minted.userPublicKey, expiresAt: expiresAt.toISOString() };
    },

    /** New credentials; every older key is revoked and its connections closed. */
    async rotate(participant: string, actor: PrincipalId): Promise<IssuedCredentials> {
      await refuseRevoked(participant);
      const minted = await deps.mint(participant);
      const revoked = await revokeKeys(participant, 'rotated', minted);
      await pushRevocations();
      await audit('rotate', actor, participant, { userPublicKey: minted.userPublicKey, revoked });
      await publishEvent(js, 'governance', 'credentials.rotated', {
        actor,
        subject: participant,
        data: { revokedKeys: revoked.length },
      });
      return { creds: minted.creds, userPublicKey: minted.userPublicKey };
    },

    /** Revokes the participant for good: status `revoked`, every key refused, connections closed. */
    async revoke(participant: string, actor: PrincipalId, reason: string): Promise<number> {
      const policyRecord: ParticipantPolicy = {
        status: 'revoked',
        reason,
        at: new Date().toISOString(),
        by: actor,
      };
      // First the status, which the ingress watches: it stops the participant even before NATS does.
      await policy.put(policyKeys.participant(participant), JSON.stringify(policyRecord));
      const revoked = await revokeKeys(participant, 'revoked');
      await pushRevocations();
      await audit('revoke', actor, participant, { reason, revoked });
      await publishEvent(js, 'governance', 'credentials.revoked', {
        actor,
        subject: participant,
        data: { reason, revokedKeys: revoked.length },
      });
      return revoked.length;
    },
  };
}

/** The credentials API of {@link createCredentials}. */
export type Credentials = ReturnType<typeof createCredentials>;
