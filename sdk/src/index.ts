export { isParleyError, ParleyError } from '@parley/contracts';
export * from './agent.js';
export * from './connect.js';
export * from './directory.js';
export * from './presence.js';
