/** True when console/dist is missing or older than its sources. */
export function consoleStale(): boolean;
/** Builds the console when stale; returns whether it built. */
export function ensureConsoleBuilt(o?: { quiet?: boolean }): boolean;
/** The console package's directory. */
export const consoleRoot: string;
