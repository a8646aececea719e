export * from './config.js';
export * from './operator.js';
export * from './service.js';
export {
  createDelegationKey,
  DelegationKeySet,
  type DelegationPrivateKey,
  publicJwk,
} from './signing-keys.js';
