export * from './bridge.js';
export * from './mapping.js';
export * from './metrics.js';
export * from './runtime.js';
export * from './state.js';
