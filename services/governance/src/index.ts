export * from './config.js';
export * from './operator.js';
export * from './service.js';
