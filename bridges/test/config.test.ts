/** The bridge process's configuration: every problem at once, the chosen bridge's settings required. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../src/config.js';

const base = {
  NATS_CREDS: '/etc/parley/bridge/bridge.creds',
  PARLEY_BRIDGE_MAPPING: '/etc/parley/mapping/mapping.yaml',
};

describe('bridge config', () => {
  it('names every setting the chosen bridge lacks', () => {
    assert.throws(
      () => loadConfig({ ...base, PARLEY_BRIDGE: 'salesforce' }),
      (err: Error) =>
        /SALESFORCE_LOGIN_URL: required/.test(err.message) &&
        /SALESFORCE_CLIENT_SECRET: required/.test(err.message) &&
        /SALESFORCE_TOPICS: at least one topic/.test(err.message),
    );
    assert.throws(() => loadConfig({ ...base, PARLEY_BRIDGE: 'sap' }), /SAP_WEBHOOK_JWKS_URL: required/);
    assert.throws(() => loadConfig({ ...base, PARLEY_BRIDGE: 'oracle' }), /PARLEY_BRIDGE/);
    assert.throws(
      () => loadConfig({ PARLEY_BRIDGE: 'databricks' }),
      /NATS_CREDS[\s\S]*PARLEY_BRIDGE_MAPPING/,
    );
    assert.throws(
      () =>
        loadConfig({
          ...base,
          PARLEY_BRIDGE: 'databricks',
          DATABRICKS_WEBHOOK_USER: 'u',
          DATABRICKS_WEBHOOK_PASSWORD: 'p',
          DATABRICKS_HOST: 'https://adb-1.azuredatabricks.net',
        }),
      /DATABRICKS_TOKEN or DATABRICKS_CLIENT_ID/,
    );
  });

  it('takes managed subscriptions instead of topics, as DeveloperName=/topic; a malformed entry is named', () => {
    const sf = {
      ...base,
      PARLEY_BRIDGE: 'salesforce',
      SALESFORCE_LOGIN_URL: 'https://acme.my.salesforce.com',
      SALESFORCE_CLIENT_ID: 'id',
      SALESFORCE_CLIENT_SECRET: 'secret',
    };
    const c = loadConfig({
      ...sf,
      SALESFORCE_MANAGED_SUBSCRIPTIONS:
        'Parley_Accounts=/data/AccountChangeEvent, Holds=/event/Credit_Hold__e',
    });
    assert.deepEqual(c.SALESFORCE_MANAGED_SUBSCRIPTIONS, [
      { name: 'Parley_Accounts', topic: '/data/AccountChangeEvent' },
      { name: 'Holds', topic: '/event/Credit_Hold__e' },
    ]);
    assert.deepEqual(c.SALESFORCE_TOPICS, []);
    assert.throws(
      () => loadConfig({ ...sf, SALESFORCE_MANAGED_SUBSCRIPTIONS: 'Parley_Accounts' }),
      /SALESFORCE_MANAGED_SUBSCRIPTIONS[\s\S]*DeveloperName=\/topic/,
    );
  });

  it('reads a complete Databricks configuration with its defaults', () => {
    const c = loadConfig({
      ...base,
      PARLEY_BRIDGE: 'databricks',
      DATABRICKS_WEBHOOK_USER: 'parley',
      DATABRICKS_WEBHOOK_PASSWORD: 'x'.repeat(32),
      SALESFORCE_TOPICS: '',
    });
    assert.equal(c.HTTP_PORT, 8080);
    assert.equal(c.PARLEY_BRIDGE_STATE_DIR, '/var/lib/parley-bridge');
    assert.equal(c.DATABRICKS_WEBHOOK_PATH, '/databricks/notifications');
    assert.deepEqual(c.SALESFORCE_TOPICS, []);
    assert.ok(Object.isFrozen(c));
  });
});
