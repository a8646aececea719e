#!/usr/bin/env node
import { fromSeed } from '@nats-io/nkeys';
import { connectNats, runServiceProcess, serverList } from '@parley/kit';
import { loadConfig } from './config.js';
import { createGovernanceService } from './service.js';

await runServiceProcess({
  name: 'governance',
  loadConfig,
  create: async (deps) => {
    const c = deps.config;
    let accountUpdates: Parameters<typeof createGovernanceService>[0]['accountUpdates'];
    if (c.PARLEY_OPERATOR_SEED && c.PARLEY_SERVICE_SIGNING_PUBLIC_KEY && c.PARLEY_SYSTEM_CREDS) {
      accountUpdates = {
        signer: {
          operatorSeed: c.PARLEY_OPERATOR_SEED,
          accountPublicKey: c.PARLEY_ACCOUNT_PUBLIC_KEY,
          serviceSigningPublicKey: c.PARLEY_SERVICE_SIGNING_PUBLIC_KEY,
          participantSigningPublicKey: fromSeed(
            new TextEncoder().encode(c.PARLEY_PARTICIPANT_SIGNING_SEED),
          ).getPublicKey(),
        },
        systemNc: await connectNats({
          servers: serverList(c.NATS_URL),
          name: 'parley-governance-sys',
          creds: c.PARLEY_SYSTEM_CREDS,
        }),
      };
    }
    return createGovernanceService({ ...deps, accountUpdates });
  },
});
