/**
 * Wires the Salesforce source into a bridge: the subscriptions, and the `salesforce.publish` tool
 * (args: `topic` and the event's fields) that outbound rules name.
 */
import type { Bridge } from '../bridge.js';
import { SalesforceAuth, type SalesforceAuthOptions } from './oauth.js';
import { SalesforceSource, type SalesforceSourceOptions } from './source.js';

export * from './avro.js';
export * from './oauth.js';
export * from './source.js';

/** Options of {@link attachSalesforce}. */
export interface AttachSalesforceOptions
  extends SalesforceAuthOptions,
    Omit<SalesforceSourceOptions, 'bridge' | 'auth'> {
  /** The Salesforce user id published events are created by. */
  publishAs?: string;
}

/** Starts the Salesforce subscriptions of `bridge` and registers its tools; stop() ends them. */
export function attachSalesforce(bridge: Bridge, o: AttachSalesforceOptions): SalesforceSource {
  const auth = new SalesforceAuth(o);
  const source = new SalesforceSource({ ...o, bridge, auth });
  bridge.tool('salesforce.publish', async (args) => {
    const { topic, ...fields } = args;
    if (typeof topic !== 'string' || !topic.startsWith('/event/')) {
      throw new Error('salesforce.publish needs a platform event topic (/event/<Name>__e)');
    }
    return source.publish(topic, fields, o.publishAs);
  });
  source.start();
  return source;
}
