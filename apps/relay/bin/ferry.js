#!/usr/bin/env node
import { main } from '../dist/cli.js';

// `ferry … | head` closes the pipe early: that is not an error.
process.stdout.on('error', (err) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

process.exitCode = await main(process.argv);
