/** Local stand-ins of the source systems' protocols, for tests and the enterprise demo. */
export * from './databricks-server.js';
export * from './salesforce-server.js';
export * from './sap-server.js';
