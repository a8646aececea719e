/** The nats-server launcher, re-exported for callers that found it here before it was a package of its own. */
export * from '@parley/nats-server';
export * from './config.js';
export * from './home.js';
export * from './standalone.js';
