import { commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

/** The MCP service's environment (when it runs as its own process). */
export const McpEnv = z.object({
  ...commonEnv,
  MCP_ALLOWED_HOSTS: z
    .string()
    .default('')
    .describe(
      'Comma-separated host names (besides localhost, 127.0.0.1 and ::1) that /mcp accepts in Host and Origin headers: DNS-rebinding protection. @default none',
    ),
});

/** The MCP service's configuration. */
export type McpConfig = z.output<typeof McpEnv>;

/** Reads and validates the MCP service's configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): McpConfig {
  return loadEnv('mcp', McpEnv, env);
}
