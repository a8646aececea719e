/** What a participant sees of its consent: its contacts and blocks, and the requests awaiting it. */
import type { ApiParsedRequest, ApiResponse, ContactRequest, consentApi } from '@parley/contracts';
import type { RequestContext } from '@parley/kit';
import type { ConsentState } from '../state.js';
import { otherOf, type PairRecord } from '../store.js';
import { isLive } from '../view.js';

/** `consent.list`. */
export async function list(
  req: ApiParsedRequest<typeof consentApi.list>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.list>> {
  const me = await c.actingFor(ctx.caller, req.of);
  const contacts: ApiResponse<typeof consentApi.list>['contacts'] = [];
  const blocked: ApiResponse<typeof consentApi.list>['blocked'] = [];
  for (const rec of c.view.pairsOf(me)) {
    if (!rec.pair.includes(me)) continue;
    const other = otherOf(rec, me);
    if (rec.contact) contacts.push({ with: other, ...rec.contact } as (typeof contacts)[number]);
    const since = rec.blocks[me];
    if (since) blocked.push({ participant: other, since } as (typeof blocked)[number]);
  }
  contacts.sort((x, y) => (x.since < y.since ? -1 : 1));
  blocked.sort((x, y) => (x.since < y.since ? -1 : 1));
  return { contacts, blocked };
}

/** `consent.pending`. */
export async function pending(
  req: ApiParsedRequest<typeof consentApi.pending>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.pending>> {
  const party = req.of ? await c.actingFor(ctx.caller, req.of) : ctx.caller;
  // A human sees its own requests and its agents'; `of` narrows to one agent.
  const mine = (id: string, rec: PairRecord) => id === party || (!req.of && rec.owners[id] === party);
  const incoming: ContactRequest[] = [];
  const outgoing: ContactRequest[] = [];
  const now = Date.now();
  for (const rec of c.view.pairsOf(party)) {
    for (const r of rec.requests) {
      if (!isLive(r, now)) continue;
      if (mine(r.to, rec)) incoming.push(r);
      else if (mine(r.from, rec)) outgoing.push(r);
    }
  }
  const byTime = (x: ContactRequest, y: ContactRequest) => (x.createdAt < y.createdAt ? -1 : 1);
  return { incoming: incoming.sort(byTime), outgoing: outgoing.sort(byTime) };
}
