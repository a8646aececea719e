export * from './config.js';
export * from './home.js';
export * from './nats-server.js';
export * from './standalone.js';
