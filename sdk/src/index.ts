export { isParleyError, ParleyError } from '@parley/contracts';
export * from './agent.js';
export * from './connect.js';
