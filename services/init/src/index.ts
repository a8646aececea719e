export * from './backbone.js';
export * from './config.js';
export * from './keys.js';
export * from './kubernetes.js';
export * from './layout.js';
export * from './run.js';
export * from './secret-store.js';
