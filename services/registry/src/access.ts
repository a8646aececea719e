/**
 * Who may see and manage what. An agent the caller may not see is reported exactly like one that
 * does not exist (NOT_FOUND), so a caller never learns that it exists.
 */
import type { Human } from '@parley/contracts';
import type { StoredAgent } from './catalog.js';

/** The caller, as the registry knows it. */
export type Viewer =
  | { kind: 'service'; id: string }
  | { kind: 'human'; id: string; org: string; role: Human['role']; superadmin: boolean }
  | { kind: 'agent'; id: string; org: string; owner: string };

/** True when the viewer sees everything (services and the superadmin). */
export function seesAll(v: Viewer): boolean {
  return v.kind === 'service' || (v.kind === 'human' && v.superadmin);
}

/** True when `v` is an admin of `org` (or sees everything). */
export function isAdminOf(v: Viewer, org: string): boolean {
  return seesAll(v) || (v.kind === 'human' && v.role === 'admin' && v.org === org);
}

/**
 * May `v` see agent `a` (in discovery, listings, getAgent, presence)?
 * - `public`: everyone;
 * - `org`: members of its org (humans and agents);
 * - `private`: its owner, the owner's other agents, the agent itself, and admins of its org.
 */
export function canSee(v: Viewer, a: StoredAgent): boolean {
  if (v.kind === 'service' || seesAll(v)) return true;
  const visibility = a.card.visibility;
  if (visibility === 'public') return true;
  if (v.org !== a.org) return false;
  if (visibility === 'org') return true;
  if (v.id === a.owner || v.id === a.id) return true;
  if (v.kind === 'agent') return v.owner === a.owner;
  return v.role === 'admin';
}

/** May `v` deregister agent `a` or rotate/revoke its credentials? Its owner and admins of its org. */
export function canManage(v: Viewer, a: StoredAgent): boolean {
  return v.id === a.owner || isAdminOf(v, a.org);
}

/** May `v` see human `u`? Members of its org (and services and the superadmin). */
export function canSeeHuman(v: Viewer, u: { org: string }): boolean {
  return v.kind === 'service' || seesAll(v) || v.org === u.org;
}

/** May `v` change agent `a`'s card? Its owner only (and services). */
export function canUpdateCard(v: Viewer, a: StoredAgent): boolean {
  return v.kind === 'service' || v.id === a.owner;
}
