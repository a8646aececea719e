export * from './operator.js';
export * from './signing-keys.js';
