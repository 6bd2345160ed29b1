import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

// Debian's Chromium through playwright-core, as the console's browser tests drive it: headless, a
// fresh profile of the test's own, and none of the background traffic this closed network refuses.

const CHROMIUM = process.env.FERRY_CHROMIUM ?? '/usr/bin/chromium';

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

export async function launchChromium(): Promise<Browser> {
  const userDataDir = mkdtempSync(join(tmpdir(), 'ferry-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    close: async () => {
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** Logs the context in through the console's form (the session cookie then serves every page), with an operator name if given. */
export async function logIn(context: BrowserContext, consoleUrl: string, token: string, operator?: string): Promise<void> {
  const page = await context.newPage();
  try {
    await page.goto(`${consoleUrl}/login`);
    await page.fill('input[name=token]', token);
    if (operator !== undefined) await page.fill('input[name=operator]', operator);
    await Promise.all([page.waitForURL(`${consoleUrl}/`), page.click('button[type=submit]')]);
  } finally {
    await page.close();
  }
}
