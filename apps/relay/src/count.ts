/**
 * `count(1, 'event')` → `1 event`, `count(2, 'event')` → `2 events`: the CLI's output read
 * `1 relay instances` and `1 problems` (issue 16). Irregular plurals are passed in.
 */
export function count(n: number | bigint | string, one: string, many = `${one}s`): string {
  return `${n} ${Number(n) === 1 ? one : many}`;
}
