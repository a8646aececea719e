/** The `parley` executable: runs the CLI with the process's arguments (bin/parley.js loads this). */
import { runCli } from './main.js';

process.exitCode = await runCli(process.argv.slice(2));
