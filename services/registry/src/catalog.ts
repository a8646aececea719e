/**
 * The registry's in-memory view of `parley_agents` (orgs, humans, agents) and of participants'
 * standing in `parley_policy`, kept up to date by KV watches, with the indexes discovery reads.
 * Every replica has its own; a replica also applies its own writes at once, so a caller reads what
 * it just wrote. Entries carry their KV revision; an older revision never replaces a newer one.
 */
import type { KvEntry } from '@nats-io/kv';
import {
  Agent,
  type Agent as AgentT,
  Human,
  type Human as HumanT,
  Org,
  type Org as OrgT,
  type ParticipantPolicy as ParticipantPolicyT,
  readStanding,
} from '@parley/contracts';
import type * as z from 'zod';

/** Keys of the `parley_agents` bucket (kit's registry-store, which `parley init` seeds through too). */
export { registryKeys } from '@parley/kit';

/** An agent as stored: the record without the computed revision and status. */
export const StoredAgent = Agent.omit({ revision: true, status: true });
export type StoredAgent = z.infer<typeof StoredAgent>;

/** An indexed agent. */
export interface AgentDoc {
  stored: StoredAgent;
  revision: number;
  /** Lowercased words of the name, skill texts and description (for free-text ranking). */
  nameWords: Set<string>;
  skillWords: Set<string>;
  descriptionWords: Set<string>;
  skillIds: Set<string>;
  tags: Set<string>;
  /** Lowercased name, for ordering. */
  sortName: string;
}

/** Splits text into lowercased words (letters and digits in any script). */
export function words(text: string): string[] {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter((w) => w.length > 0);
}

function addTo(map: Map<string, Set<string>>, key: string, id: string) {
  let set = map.get(key);
  if (!set) {
    set = new Set();
    map.set(key, set);
  }
  set.add(id);
}

function removeFrom(map: Map<string, Set<string>>, key: string, id: string) {
  const set = map.get(key);
  if (!set) return;
  set.delete(id);
  if (set.size === 0) map.delete(key);
}

/** The in-memory registry. */
export class Catalog {
  readonly orgs = new Map<string, { org: OrgT; revision: number }>();
  readonly users = new Map<string, { user: HumanT; revision: number }>();
  readonly agents = new Map<string, AgentDoc>();
  /** Suspended or revoked participants (from `parley_policy`); absent = active. */
  readonly standing = new Map<string, ParticipantPolicyT>();
  /** How many malformed `participant.<id>` records were read (each counts as suspended). */
  malformedStandings = 0;

  /** Exact skill id → agents. */
  readonly bySkillId = new Map<string, Set<string>>();
  /** Word of a skill name → agents. */
  readonly bySkillWord = new Map<string, Set<string>>();
  /** Lowercased tag → agents. */
  readonly byTag = new Map<string, Set<string>>();
  /** Any word of name, description or skills → agents. */
  readonly byWord = new Map<string, Set<string>>();
  readonly byRuntime = new Map<string, Set<string>>();
  readonly byOwner = new Map<string, Set<string>>();
  readonly byOrg = new Map<string, Set<string>>();
  /** Users of each org. */
  readonly usersByOrg = new Map<string, Set<string>>();

  private readonly revisions = new Map<string, number>();

  /** True when `revision` of `key` is newer than what is held (and remembers it). */
  private fresh(key: string, revision: number): boolean {
    if ((this.revisions.get(key) ?? 0) >= revision) return false;
    this.revisions.set(key, revision);
    return true;
  }

  /** Applies an entry of `parley_agents`. Unknown keys (name claims) are ignored. */
  applyRegistryEntry(e: KvEntry): void {
    const dot = e.key.indexOf('.');
    const kind = e.key.slice(0, dot);
    const id = e.key.slice(dot + 1);
    if (kind !== 'org' && kind !== 'user' && kind !== 'agent') return;
    if (!this.fresh(e.key, e.revision)) return;
    const put = e.operation === 'PUT';
    if (kind === 'org') {
      if (put) this.orgs.set(id, { org: Org.parse(e.json()), revision: e.revision });
      else this.orgs.delete(id);
    } else if (kind === 'user') {
      const old = this.users.get(id);
      if (old) removeFrom(this.usersByOrg, old.user.org, id);
      if (put) {
        const user = Human.parse(e.json());
        this.users.set(id, { user, revision: e.revision });
        addTo(this.usersByOrg, user.org, id);
      } else this.users.delete(id);
    } else {
      this.unindex(id);
      if (put) this.index(StoredAgent.parse(e.json()), e.revision);
    }
  }

  /** Applies an entry of `parley_policy`; only `participant.<id>` keys matter here. */
  applyPolicyEntry(e: KvEntry): void {
    if (!e.key.startsWith('participant.')) return;
    if (!this.fresh(`policy:${e.key}`, e.revision)) return;
    const id = e.key.slice('participant.'.length);
    if (e.operation !== 'PUT' || e.length === 0) this.standing.delete(id);
    else {
      // The same reading as every other service: a malformed record is suspended, never active.
      const { standing, malformed } = readStanding(e.value);
      if (malformed) this.malformedStandings++;
      if (standing.status !== 'active') this.standing.set(id, standing);
      else this.standing.delete(id);
    }
  }

  /** Drops an agent this replica just deleted (the watch's delete marker confirms it later). */
  forgetAgent(id: string): void {
    this.unindex(id);
  }

  /** The full Agent record (revision and standing filled in). */
  agentRecord(doc: AgentDoc): AgentT {
    return {
      ...doc.stored,
      revision: doc.revision,
      status: this.standing.get(doc.stored.id)?.status ?? 'active',
    };
  }

  private index(stored: StoredAgent, revision: number): void {
    const { id, card } = stored;
    const doc: AgentDoc = {
      stored,
      revision,
      nameWords: new Set(words(card.name)),
      skillWords: new Set(
        card.skills.flatMap((s) => [
          ...words(s.id),
          ...words(s.name),
          ...words(s.description),
          ...s.tags.flatMap(words),
        ]),
      ),
      descriptionWords: new Set(words(card.description)),
      skillIds: new Set(card.skills.map((s) => s.id.toLowerCase())),
      tags: new Set(card.skills.flatMap((s) => s.tags.map((t) => t.toLowerCase()))),
      sortName: card.name.toLowerCase(),
    };
    this.agents.set(id, doc);
    for (const s of doc.skillIds) addTo(this.bySkillId, s, id);
    for (const s of card.skills) for (const w of words(s.name)) addTo(this.bySkillWord, w, id);
    for (const t of doc.tags) addTo(this.byTag, t, id);
    for (const w of [...doc.nameWords, ...doc.skillWords, ...doc.descriptionWords]) addTo(this.byWord, w, id);
    addTo(this.byRuntime, card.runtime, id);
    addTo(this.byOwner, stored.owner, id);
    addTo(this.byOrg, stored.org, id);
  }

  private unindex(id: string): void {
    const doc = this.agents.get(id);
    if (!doc) return;
    const { card } = doc.stored;
    for (const s of doc.skillIds) removeFrom(this.bySkillId, s, id);
    for (const s of card.skills) for (const w of words(s.name)) removeFrom(this.bySkillWord, w, id);
    for (const t of doc.tags) removeFrom(this.byTag, t, id);
    for (const w of [...doc.nameWords, ...doc.skillWords, ...doc.descriptionWords])
      removeFrom(this.byWord, w, id);
    removeFrom(this.byRuntime, card.runtime, id);
    removeFrom(this.byOwner, doc.stored.owner, id);
    removeFrom(this.byOrg, doc.stored.org, id);
    this.agents.delete(id);
  }
}
