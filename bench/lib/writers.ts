/**
 * Runs `writers` concurrent loops for `seconds`; each loop calls
 * `once(writer, i)` back to back (i = writer, writer + writers, …, so no two
 * calls share an i). Returns completed calls per second.
 */
export async function loopWriters(writers: number, seconds: number, once: (writer: number, i: number) => Promise<void>): Promise<number> {
  const deadline = performance.now() + seconds * 1000;
  let count = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      let i = w;
      while (performance.now() < deadline) {
        await once(w, i);
        count++;
        i += writers;
      }
    }),
  );
  return count / ((performance.now() - started) / 1000);
}
