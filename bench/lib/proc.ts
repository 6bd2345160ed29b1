/** CPU time of processes, from /proc (Linux only). */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

let ticks: number | undefined;

/** Clock ticks per second (`getconf CLK_TCK`, usually 100). */
export function clockTicks(): number {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return ticks;
}

/**
 * Busy CPU seconds of the whole machine, summed over its cores (every state of /proc/stat's `cpu`
 * line but idle, iowait and steal: steal is time the hypervisor gave elsewhere, not this machine's
 * use), and the number of cores /proc/stat lists: the busy share over a span is the difference of
 * two samples divided by the span times `cores`. Undefined where /proc cannot be read.
 */
export function machineBusySeconds(): { busy: number; cores: number } | undefined {
  try {
    const lines = readFileSync('/proc/stat', 'utf8').split('\n');
    const f = (lines[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already inside user and nice)
    const busy = (f[0] ?? 0) + (f[1] ?? 0) + (f[2] ?? 0) + (f[5] ?? 0) + (f[6] ?? 0);
    const cores = lines.filter((l) => /^cpu\d+ /.test(l)).length;
    return cores > 0 ? { busy: busy / clockTicks(), cores } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * /proc/<pid>/stat from field 3 (state) on, or undefined when the process is gone: the fields after
 * the command name, which may contain spaces, start at ") ". Field N is at index N - 3.
 */
function statFieldsOf(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** utime + stime of a process in seconds, or undefined when it is gone. */
export function cpuSecondsOf(pid: number): number | undefined {
  const rest = statFieldsOf(pid);
  if (!rest) return undefined;
  // utime is field 14, stime field 15.
  return (Number(rest[11]) + Number(rest[12])) / clockTicks();
}

/** A process's start time in clock ticks after boot (/proc/<pid>/stat field 22): with the pid, it names one process, even after the pid is reused. */
export function startTicksOf(pid: number): number | undefined {
  const rest = statFieldsOf(pid);
  return rest ? Number(rest[19]) : undefined;
}

/** Sum of utime + stime over pids; pids not running count as 0. */
export function cpuSecondsOfAll(pids: Iterable<number>): Map<number, number> {
  const out = new Map<number, number>();
  for (const pid of pids) out.set(pid, cpuSecondsOf(pid) ?? 0);
  return out;
}

/** Local TCP ports of the sockets a process holds open (from /proc/<pid>/fd and /proc/net/tcp*). */
export function localPortsOf(pid: number): number[] {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m?.[1]) inodes.add(m[1]);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return [];
  }
  const ports: number[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const local = f[1];
      const inode = f[9];
      if (local && inode && inodes.has(inode)) ports.push(Number.parseInt(local.split(':')[1] ?? '0', 16));
    }
  }
  return ports;
}

/**
 * CPU seconds (utime + stime) of every process whose command name (`/proc/<pid>/comm`) is one of
 * `names`, summed per name: all of PostgreSQL's processes, say, with `['postgres']`. A process
 * that ended since the last call drops out of the sum, so take differences over spans in which
 * the servers' processes stay up.
 */
export function cpuSecondsByCommand(names: readonly string[]): Record<string, number> {
  const out: Record<string, number> = Object.fromEntries(names.map((n) => [n, 0]));
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  for (const pid of pids) {
    let comm: string;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      continue; // ended meanwhile
    }
    if (comm in out) out[comm] = (out[comm] ?? 0) + (cpuSecondsOf(Number(pid)) ?? 0);
  }
  return out;
}
