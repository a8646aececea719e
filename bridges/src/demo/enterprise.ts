/**
 * The enterprise demo: one case across three systems, each behind its bridge.
 *
 * A change to an Account arrives from "Salesforce" (a CDC event over our local Pub/Sub API
 * server, carrying a trace). The Salesforce bridge, acting for maria — the Salesforce user who made
 * the change, mapped to a Parley person who delegated the case work to it — opens a case room with
 * the Databricks bridge, the SAP bridge and maria, and asks Databricks for a risk score (a notebook
 * run through our local Jobs API 2.1) and SAP for the customer's open orders (our local S/4HANA
 * OData API), handing each an exchanged token. With both answers in, it proposes a credit hold;
 * maria approves, and the Salesforce bridge publishes a `Credit_Hold__e` Platform Event back, on
 * her behalf. Every message of the case is in the trace the CDC event started.
 */
import { consentApi, governanceApi, type RoomMessage, registryApi } from '@parley/contracts';
import { type Logger, silentLogger } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import { ACTION_MEDIA_TYPE, RESULT_MEDIA_TYPE } from '../bridge.js';
import { attachDatabricks } from '../databricks/index.js';
import { type LocalDatabricks, startLocalDatabricks } from '../local/databricks-server.js';
import { type LocalSalesforce, startLocalSalesforce } from '../local/salesforce-server.js';
import { type LocalSap, startLocalSap } from '../local/sap-server.js';
import { type RunningBridge, startBridge } from '../runtime.js';
import { attachSalesforce, type SalesforceSource } from '../salesforce/index.js';
import { attachSap } from '../sap/index.js';

/** Media type of the Salesforce bridge's proposal to a person. */
export const PROPOSAL_MEDIA_TYPE = 'application/vnd.parley.proposal+json';

const MARIA_SF_USER = '0058c00000MARIAAAA';
const ACCOUNT = '0018c00002ACMEAAAA';
const CUSTOMER = '1000123';

/** Options of {@link runEnterpriseDemo}. */
export interface EnterpriseDemoOptions {
  natsUrl: string;
  /** Creds of an admin of `org` (the local admin). */
  adminCreds: string;
  org: string;
  /** Where the bridges keep their state. */
  stateDir: string;
  out: (line: string) => void;
  log?: Logger;
  /** Participants added to the case room to follow it (e.g. the local admin, for the CLI). */
  watchers?: string[];
}

/** How the case ended. */
export interface EnterpriseOutcome {
  room: string;
  published: Record<string, unknown>;
  answer: string;
}

/** A running demo. */
export interface EnterpriseDemo {
  /** The trace id the CDC event carried. */
  traceId: string;
  /**
   * Resolves once the Platform Event was published: the case room, the event as Salesforce
   * received it, and the Salesforce bridge's answer saying so (its audit chain leads to maria).
   */
  finished: Promise<EnterpriseOutcome>;
  ids: { salesforce: string; databricks: string; sap: string; maria: string };
  /** maria's connection (a member of the case room). */
  maria: Agent;
  systems: { salesforce: LocalSalesforce; sap: LocalSap; databricks: LocalDatabricks };
  stop(): Promise<void>;
}

const textOf = (m: RoomMessage) => m.parts.map((p) => (p.type === 'text' ? p.text : '')).join(' ');
const randomHex = (n: number) =>
  Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');

/** Starts the local systems and the three bridges, and sends the Account change. */
export async function runEnterpriseDemo(o: EnterpriseDemoOptions): Promise<EnterpriseDemo> {
  const log = o.log ?? silentLogger();
  const sf = await startLocalSalesforce();
  const sap = await startLocalSap({
    orders: [
      {
        SalesOrder: '4711',
        SoldToParty: CUSTOMER,
        TotalNetAmount: '120000.00',
        TransactionCurrency: 'EUR',
        OverallSDProcessStatus: 'A',
      },
      {
        SalesOrder: '4718',
        SoldToParty: CUSTOMER,
        TotalNetAmount: '54000.00',
        TransactionCurrency: 'EUR',
        OverallSDProcessStatus: 'B',
      },
      {
        SalesOrder: '4720',
        SoldToParty: CUSTOMER,
        TotalNetAmount: '8400.00',
        TransactionCurrency: 'EUR',
        OverallSDProcessStatus: 'A',
      },
      {
        SalesOrder: '4690',
        SoldToParty: CUSTOMER,
        TotalNetAmount: '31000.00',
        TransactionCurrency: 'EUR',
        OverallSDProcessStatus: 'C',
      },
    ],
  });
  const dbx = await startLocalDatabricks();
  dbx.notebooks.set('/Repos/risk/score_account', (p) => ({
    output: {
      account: p.account,
      score: 0.91,
      band: 'high',
      drivers: ['3 late payments in 6 months', 'exposure above the credit limit'],
    },
  }));
  o.out(
    `enterprise  local Salesforce (Pub/Sub API, gRPC ${sf.endpoint}), SAP (OData ${sap.baseUrl}), Databricks (Jobs API ${dbx.host})`,
  );

  const admin = await connect({ servers: o.natsUrl, creds: o.adminCreds, presence: false });
  const running: RunningBridge[] = [];
  let source: SalesforceSource | undefined;
  let maria: Agent | undefined;
  try {
    await admin.call(consentApi.setPolicy, { org: o.org, preApproveWithinOrg: true });
    const scopes = {
      salesforce: 'tool:salesforce.publish',
      databricks: 'tool:databricks.runs.submit',
      sap: 'tool:sap.salesorders.open',
    };
    const person = await admin.call(registryApi.createUser, {
      name: `maria-${Date.now().toString(36)}`,
      org: o.org,
    });
    await admin.call(governanceApi.setGrants, { participant: person.user.id, scopes: Object.values(scopes) });
    const bridgeAgent = async (name: 'salesforce' | 'databricks' | 'sap', s: string[]) => {
      const r = await admin.call(registryApi.createAgent, {
        card: {
          name: `${name}-bridge`,
          description: `The ${name} bridge`,
          runtime: 'bridge',
          visibility: 'org',
          scopes: s,
          skills: [{ id: name, name, tags: [name, 'bridge'] }],
        },
      });
      return { id: r.agent.id, creds: r.credentials.creds };
    };
    const sfAgent = await bridgeAgent('salesforce', Object.values(scopes));
    const dbxAgent = await bridgeAgent('databricks', [scopes.databricks]);
    const sapAgent = await bridgeAgent('sap', [scopes.sap]);
    const ids = { salesforce: sfAgent.id, databricks: dbxAgent.id, sap: sapAgent.id, maria: person.user.id };
    o.out(
      `enterprise  bridges (runtime bridge): salesforce ${ids.salesforce}, databricks ${ids.databricks}, sap ${ids.sap}`,
    );

    maria = await connect({ servers: o.natsUrl, creds: person.credentials.creds, presence: false });
    // maria delegates the case work to the Salesforce bridge: it acts for her, never on its own authority.
    const caseToken = (await maria.tokens.issue(ids.salesforce, Object.values(scopes), { ttlSeconds: 3600 }))
      .token;
    o.out(
      `enterprise  maria (${ids.maria}) is Salesforce user ${MARIA_SF_USER}; she delegates the case work to the salesforce bridge`,
    );

    const sfBridge = await startBridge({
      servers: o.natsUrl,
      creds: sfAgent.creds,
      stateDir: `${o.stateDir}/salesforce`,
      log,
      processMetrics: false,
      env: { MARIA_SF_TOKEN: caseToken },
      mapping: `
bridge: salesforce
requireIdentity: true
inbound:
  - type: /data/AccountChangeEvent:UPDATE
    to:
      case:
        key: "{{payload.ChangeEventHeader.recordIds.0}}"
        title: "Case: {{payload.Name}} ({{payload.ChangeEventHeader.recordIds.0}})"
        members: [${[ids.databricks, ids.sap, ids.maria, ...(o.watchers ?? [])].join(', ')}]
    text: "Salesforce: {{payload.Name}} changed ({{payload.ChangeEventHeader.changedFields}}): Rating {{payload.Rating}}"
    ask:
      - agent: ${ids.databricks}
        action: score
        args: { account: "{{payload.ChangeEventHeader.recordIds.0}}" }
      - agent: ${ids.sap}
        action: openOrders
        args: { customer: "{{payload.AccountNumber}}" }
identities:
  "${MARIA_SF_USER}": { tokenEnv: MARIA_SF_TOKEN, user: ${ids.maria} }
outbound:
  - action: creditHold
    tool: salesforce.publish
    args: { topic: /event/Credit_Hold__e }
    reply: "Salesforce: Credit_Hold__e published for {{args.Account_Id__c}} (event {{result.eventId}})"
`,
    });
    running.push(sfBridge);
    const dbxBridge = await startBridge({
      servers: o.natsUrl,
      creds: dbxAgent.creds,
      stateDir: `${o.stateDir}/databricks`,
      log,
      processMetrics: false,
      mapping: `
bridge: databricks
outbound:
  - action: score
    tool: databricks.runs.submit
    args: { notebook: /Repos/risk/score_account, run_name: "credit risk {{args.account}}" }
    reply: "Databricks: risk score {{result.output.score}} ({{result.output.band}}): {{result.output.drivers}}"
`,
    });
    running.push(dbxBridge);
    attachDatabricks(dbxBridge.bridge, dbxBridge.app, {
      webhookUser: 'parley',
      webhookPassword: randomHex(24),
      jobs: { host: dbx.host, token: dbx.token, pollMs: 50 },
    });
    const sapBridge = await startBridge({
      servers: o.natsUrl,
      creds: sapAgent.creds,
      stateDir: `${o.stateDir}/sap`,
      log,
      processMetrics: false,
      mapping: `
bridge: sap
outbound:
  - action: openOrders
    tool: sap.salesorders.open
    reply: "SAP: {{result.count}} open sales orders for customer {{result.customer}}, {{result.totalNetAmount}} {{result.currency}}"
`,
    });
    running.push(sapBridge);
    attachSap(sapBridge.bridge, sapBridge.app, {
      jwksUrl: sap.jwksUrl,
      issuer: sap.issuer,
      audience: 'parley-sap-bridge',
      odata: { baseUrl: sap.baseUrl, tokenUrl: sap.tokenUrl, ...sap.odataClient },
    });

    // The Salesforce bridge's own step: with the score and the orders in, propose the action to maria.
    const answers = new Map<string, { score?: Record<string, unknown>; orders?: Record<string, unknown> }>();
    sfBridge.bridge.observe(async (d) => {
      const part = d.message.parts.find((p) => p.type === 'data' && p.mediaType === RESULT_MEDIA_TYPE);
      if (part?.type !== 'data' || part.data.error) return;
      const got = answers.get(d.room) ?? {};
      if (part.data.action === 'score') got.score = part.data.result as Record<string, unknown>;
      if (part.data.action === 'openOrders') got.orders = part.data.result as Record<string, unknown>;
      answers.set(d.room, got);
      if (!got.score || !got.orders) return;
      answers.delete(d.room);
      const score = (got.score.output as { score: number }).score;
      const text =
        `Salesforce: risk ${score} and ${got.orders.totalNetAmount} ${got.orders.currency} in ${got.orders.count} open orders. ` +
        `I propose a credit hold on ${ACCOUNT} until finance reviews it. @maria do you approve?`;
      await sfBridge.agent.rooms.room(d.room).send(
        [
          { type: 'text', text },
          {
            type: 'data',
            mediaType: PROPOSAL_MEDIA_TYPE,
            data: { proposal: 'creditHold', account: ACCOUNT, score, openOrders: got.orders.totalNetAmount },
          },
        ],
        { mentions: [ids.maria], delegation: null },
      );
    });

    // maria sees the case and answers the proposal; her approval hands the bridge a token for it.
    let done!: (v: EnterpriseOutcome) => void;
    const finished = new Promise<EnterpriseOutcome>((r) => {
      done = r;
    });
    const names = new Map([
      [ids.salesforce, 'salesforce'],
      [ids.databricks, 'databricks'],
      [ids.sap, 'sap'],
      [ids.maria, 'maria'],
    ]);
    const asMaria = maria;
    asMaria.on('message', async (d) => {
      const who = names.get(d.message.sender.id) ?? d.message.sender.id;
      const text = textOf(d.message).trim();
      if (text) o.out(`case  ${who.padEnd(10)} ${d.message.kind === 'status' ? '· ' : ''}${text}`);
      const proposal = d.message.parts.find((p) => p.type === 'data' && p.mediaType === PROPOSAL_MEDIA_TYPE);
      if (proposal?.type === 'data' && d.message.mentions.includes(ids.maria)) {
        const approval = (
          await asMaria.tokens.issue(ids.salesforce, [scopes.salesforce], { ttlSeconds: 600 })
        ).token;
        await asMaria.rooms.room(d.room).send(
          [
            { type: 'text', text: 'Approved: put the account on credit hold.' },
            {
              type: 'data',
              mediaType: ACTION_MEDIA_TYPE,
              data: {
                agent: ids.salesforce,
                action: 'creditHold',
                args: {
                  Account_Id__c: proposal.data.account,
                  Reason__c: `risk ${proposal.data.score}, approved by maria`,
                },
              },
            },
          ],
          { replyTo: d.message.id, mentions: [ids.salesforce], delegation: approval },
        );
        o.out(
          `case  ${'maria'.padEnd(10)} Approved: put the account on credit hold. (hands the salesforce bridge a token for tool:salesforce.publish)`,
        );
      }
      if (d.message.sender.id === ids.salesforce && text.includes('Credit_Hold__e published')) {
        const published = sf.published('/event/Credit_Hold__e')[0] ?? {};
        done({ room: d.room, published, answer: d.message.id });
      }
    });
    await asMaria.listening;
    await Promise.all(running.map((r) => r.bridge.start()));
    await Promise.all([dbxBridge, sapBridge].map((r) => r.app.listen({ port: 0, host: '127.0.0.1' })));
    source = attachSalesforce(sfBridge.bridge, {
      endpoint: sf.endpoint,
      insecure: true,
      loginUrl: sf.loginUrl,
      clientId: sf.clientId,
      clientSecret: sf.clientSecret,
      topics: ['/data/AccountChangeEvent'],
      startAt: 'LATEST',
    });
    await new Promise<void>((resolve) => {
      const t = setInterval(() => {
        if (sf.fetchRequests.length > 0) {
          clearInterval(t);
          resolve();
        }
      }, 10);
    });

    const traceId = randomHex(32);
    sf.emitChange('Account', {
      recordIds: [ACCOUNT],
      fields: { Name: 'Acme Industrial', AccountNumber: CUSTOMER, Rating: 'Cold', AnnualRevenue: 4_200_000 },
      changedFields: ['Rating', 'AnnualRevenue'],
      commitUser: MARIA_SF_USER,
      traceparent: `00-${traceId}-${randomHex(16)}-01`,
    });
    o.out(`enterprise  Salesforce → CDC UPDATE Account ${ACCOUNT} by ${MARIA_SF_USER}, trace ${traceId}`);
    const src = source;
    const m = maria;
    return {
      traceId,
      finished,
      ids,
      maria: m,
      systems: { salesforce: sf, sap, databricks: dbx },
      async stop() {
        await src.stop();
        await Promise.allSettled(running.map((r) => r.stop()));
        await Promise.allSettled([m.close(), admin.close()]);
        await Promise.allSettled([sf.stop(), sap.stop(), dbx.stop()]);
      },
    };
  } catch (err) {
    await source?.stop();
    await Promise.allSettled(running.map((r) => r.stop()));
    await Promise.allSettled([maria?.close(), admin.close(), sf.stop(), sap.stop(), dbx.stop()]);
    throw err;
  }
}

/**
 * The closing lines of the demo: what Salesforce received, and how many of the case room's
 * messages are in the trace the CDC event started.
 */
export async function enterpriseSummary(demo: EnterpriseDemo, outcome: EnterpriseOutcome): Promise<string[]> {
  const history = await demo.maria.rooms.room(outcome.room).history({ order: 'oldest', limit: 200 });
  const said = history.entries.filter((e) => e.message.kind === 'message' || e.message.kind === 'status');
  const inTrace = said.filter((e) => e.message.trace?.traceparent.split('-')[1] === demo.traceId).length;
  return [
    `enterprise  Salesforce ← Credit_Hold__e ${JSON.stringify(outcome.published)}`,
    `enterprise  case room ${outcome.room}: ${inTrace} of ${said.length} messages in trace ${demo.traceId}`,
  ];
}
