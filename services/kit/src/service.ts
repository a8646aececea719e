/** What every Parley service returns from its `create…Service(deps)`. */
export interface ParleyService {
  /** e.g. `rooms`. */
  readonly name: string;
  /** Subscribes and starts background work. Resolves once the service answers requests. */
  start(): Promise<void>;
  /** Stops taking work, lets in-flight work finish, releases what it holds (leases). */
  stop(): Promise<void>;
  /** True while the service is started and healthy. */
  ready(): boolean;
}
