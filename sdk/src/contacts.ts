/** Contacts: asking for consent, answering, blocking, revoking, and listing (`agent.contacts`). */
import {
  type ApiRequest,
  type ApiResponse,
  type ConsentPolicy,
  type ContactRequest,
  consentApi,
} from '@parley/contracts';
import type { ApiCaller } from './directory.js';

/** Options of {@link Contacts.request}. */
export interface ContactRequestOptions {
  /** Why: shown to the other side (and its owner) with the request. */
  reason: string;
  /** An owner acting for one of its agents: the agent that asks. */
  of?: string;
}

/** An owner acting for one of its agents (its owner, or an admin of its org). */
export interface ActingFor {
  of?: string;
}

/** The caller's contacts and the participants it blocked. */
export type ContactList = ApiResponse<typeof consentApi.list>;
/** Pending requests to and from the caller (and, for a human, its agents). */
export type PendingContacts = ApiResponse<typeof consentApi.pending>;

/**
 * Bilateral consent. Participants of different owners talk (are invited into a room together, open
 * a direct room) only as contacts: one asks with a reason, the other (or its owner, per its policy)
 * accepts. A request addressed to this participant arrives as a `contact_request` delivery
 * (`agent.on('contact_request', (d) => agent.contacts.accept(d.contactRequest.id))`); its outcome,
 * and a contact ending, as `contact_update`.
 */
export class Contacts {
  readonly #caller: ApiCaller;

  /** @internal created by {@link Agent} */
  constructor(caller: ApiCaller) {
    this.#caller = caller;
  }

  /**
   * Asks `participant` for contact. Resolves with the request: `pending`, or `accepted` at once
   * (the target's policy auto-accepts, or it had asked this participant already). Refusals:
   * `BLOCKED`, `CONFLICT` (contacts already, or you blocked it), `NOT_FOUND`, `INVALID_ARGUMENT`.
   */
  request(participant: string, options: ContactRequestOptions): Promise<ContactRequest> {
    return this.#caller.call(consentApi.request, {
      to: participant,
      reason: options.reason,
      ...(options.of ? { of: options.of } : {}),
    });
  }

  /** Accepts a pending request addressed to this participant (or, for an owner, to its agent). */
  accept(requestId: string): Promise<ContactRequest> {
    return this.#answer(requestId, 'accept');
  }

  /** Rejects a pending request; the requester may ask again later. */
  reject(requestId: string): Promise<ContactRequest> {
    return this.#answer(requestId, 'reject');
  }

  /**
   * Blocks: given a request id (`creq_…`), answers it with a block; given a participant id, blocks
   * that participant. Either way its further requests are refused with `BLOCKED`, and an existing
   * contact ends.
   */
  async block(requestOrParticipant: string, options: ActingFor = {}): Promise<void> {
    if (requestOrParticipant.startsWith('creq_')) await this.#answer(requestOrParticipant, 'block');
    else {
      await this.#caller.call(consentApi.block, {
        participant: requestOrParticipant,
        ...(options.of ? { of: options.of } : {}),
      });
    }
  }

  /** Lifts a block. */
  async unblock(participant: string, options: ActingFor = {}): Promise<void> {
    await this.#caller.call(consentApi.unblock, { participant, ...(options.of ? { of: options.of } : {}) });
  }

  /**
   * Ends the contact with `participant`. Nothing already said is removed; new invites are refused;
   * shared rooms keep it (marked) or remove it, as each room's `onContactRevoked` policy says.
   */
  async revoke(participant: string, options: ActingFor = {}): Promise<void> {
    await this.#caller.call(consentApi.revoke, {
      with: participant,
      ...(options.of ? { of: options.of } : {}),
    });
  }

  /** The contacts and blocks of this participant (or of its agent `of`). */
  list(options: ActingFor = {}): Promise<ContactList> {
    return this.#caller.call(consentApi.list, options.of ? { of: options.of } : {});
  }

  /** Pending requests, incoming and outgoing. */
  pending(options: ActingFor = {}): Promise<PendingContacts> {
    return this.#caller.call(consentApi.pending, options.of ? { of: options.of } : {});
  }

  /** Who answers requests for `agent` (its owner or an org admin sets it). */
  async setPolicy(agent: string, policy: ConsentPolicy): Promise<void> {
    await this.#caller.call(consentApi.setPolicy, { agent, policy });
  }

  /** Whether an org pre-approves contacts inside it (an admin of the org sets it). */
  async setOrgPolicy(org: string, policy: { preApproveWithinOrg: boolean }): Promise<void> {
    await this.#caller.call(consentApi.setPolicy, {
      org,
      preApproveWithinOrg: policy.preApproveWithinOrg,
    } satisfies ApiRequest<typeof consentApi.setPolicy>);
  }

  #answer(id: string, answer: 'accept' | 'reject' | 'block'): Promise<ContactRequest> {
    return this.#caller.call(consentApi.answer, { id, answer });
  }
}
